package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// configMapCases edit the node-local-dns and kube-dns ConfigMaps with kubectl, as an operator would, and time two
// things apart: the kubelet's propagation (until the file in the pod's volume changes) and ours (from there until
// the answer changes).
func configMapCases(ctx context.Context, c *cluster, r *results) {
	// node-local-dns: a new server block answering one name from a hosts entry.
	orig, err := c.kubectl(ctx, "-n", "kube-system", "get", "configmap", "node-local-dns", "-o", "jsonpath={.data.Corefile}")
	if err != nil {
		r.fail("configmap node-local-dns", err)
		return
	}
	block := fmt.Sprintf("edit.test:53 {\n    errors\n    bind %s %s\n    hosts {\n        192.0.2.99 probe.edit.test\n    }\n}\n", localDNSIP, kubeDNSIP)
	edited := orig + block
	err = timedEdit(ctx, c, r, "node-local-dns", "config-volume/Corefile.base", "edit.test:53",
		func() error { return patchData(ctx, c, "node-local-dns", map[string]any{"Corefile": edited}) },
		func(i int) (bool, error) {
			a, err := hostQuery(ctx, c.local, localDNSIP, "A", "probe.edit.test")
			return err == nil && a.has("A", "192.0.2.99"), err
		},
		func() (bool, error) {
			a, err := hostQuery(ctx, c.local, localDNSIP, "A", "probe.edit.test")
			return err == nil && a.has("A", upstreamA), err
		})
	r.check("configmap node-local-dns edit changes answers", "", err)
	if err := patchData(ctx, c, "node-local-dns", map[string]any{"Corefile": orig}); err != nil {
		r.fail("configmap node-local-dns restore", err)
	}

	// kube-dns: a stub domain sends *.stub.test to another server. A fresh name per query keeps caches out of it.
	stub := fmt.Sprintf(`{"stub.test": ["%s"]}`, stubDomainIP)
	err = timedEdit(ctx, c, r, "kube-dns", "kube-dns-config/stubDomains", "stub.test",
		func() error { return patchData(ctx, c, "kube-dns", map[string]any{"stubDomains": stub}) },
		func(i int) (bool, error) {
			a, err := hostQuery(ctx, c.local, localDNSIP, "A", fmt.Sprintf("q%d.stub.test", i))
			return err == nil && a.has("A", stubDomainA), err
		},
		func() (bool, error) {
			a, err := hostQuery(ctx, c.local, localDNSIP, "A", "before.stub.test")
			return err == nil && a.has("A", upstreamA), err
		})
	r.check("configmap kube-dns stubDomains edit changes answers", "", err)
	if err := patchData(ctx, c, "kube-dns", map[string]any{"stubDomains": nil}); err != nil {
		r.fail("configmap kube-dns restore", err)
	}
}

// timedEdit checks the answer before, applies the edit, then polls the pod's volume file for marker and the
// answer for the change, and records both delays.
func timedEdit(ctx context.Context, c *cluster, r *results, cm, volFile, marker string, edit func() error,
	changed func(i int) (bool, error), before func() (bool, error)) error {
	if ok, err := before(); !ok {
		return fmt.Errorf("before the edit: unexpected answer (%v)", err)
	}
	a, err := currentAgent(ctx, c, c.local)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.local.state, "ns/var-lib/kubelet/pods", a.uid, "volumes/kubernetes.io~configmap")
	start := time.Now()
	if err := edit(); err != nil {
		return err
	}
	var inVolume, answered time.Duration
	i := 0
	err = poll(ctx, 180*time.Second, 100*time.Millisecond, func() (bool, error) {
		if inVolume == 0 {
			if b, err := os.ReadFile(filepath.Join(dir, volFile)); err == nil && strings.Contains(string(b), marker) {
				inVolume = time.Since(start)
			}
		}
		i++
		ok, err := changed(i)
		if ok && answered == 0 {
			answered = time.Since(start)
		}
		return inVolume != 0 && answered != 0, err
	})
	if err != nil {
		return fmt.Errorf("after the edit (file in volume after %v, answer after %v): %w", inVolume, answered, err)
	}
	r.figure("configmap "+cm+": kubelet propagation", "%.1f s", inVolume.Seconds())
	r.figure("configmap "+cm+": ours, volume to new answer", "%.2f s", (answered - inVolume).Seconds())
	return nil
}

// patchData merges keys into a ConfigMap's data; a nil value removes the key.
func patchData(ctx context.Context, c *cluster, cm string, data map[string]any) error {
	p, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return err
	}
	_, err = c.kubectl(ctx, "-n", "kube-system", "patch", "configmap", cm, "--type=merge", "-p", string(p))
	return err
}
