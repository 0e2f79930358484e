package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// suite runs the cases of one mode against a cluster that is up. Cases that need an earlier step (the DaemonSet
// Ready) are counted as failed with that reason when the step failed, so a broken start cannot pass quietly.
func suite(ctx context.Context, c *cluster, r *results) {
	if !r.check("cluster DNS and clients (kube-dns on node-2, clients on node-1 and node-2)", "", setupCluster(ctx, c)) {
		return
	}
	if os.Getenv("CLUSTER_ONLY") == "first-start" { // the first-start cases alone (firststart.go)
		firstStartCases(ctx, c, r)
		return
	}
	if os.Getenv("CLUSTER_ONLY") == "helm" { // the chart's cases alone (helmcases.go)
		before, err := kubeProxyServingKubeDNS(ctx, c)
		if r.check("kube-proxy tables before (both nodes)", fmt.Sprintf("%d lines", strings.Count(before, "\n")), err) {
			helmCases(ctx, c, r, before)
		}
		return
	}
	if os.Getenv("CLUSTER_ONLY") == "clients" { // who is asking, without and with pod identity (clients.go)
		before, err := kubeProxyServingKubeDNS(ctx, c)
		if r.check("kube-proxy tables before (both nodes)", fmt.Sprintf("%d lines", strings.Count(before, "\n")), err) {
			clientsCases(ctx, c, r, before)
		}
		return
	}
	if os.Getenv("CLUSTER_ONLY") == "readme" { // README.md's install, word for word (readme.go)
		before, err := kubeProxyServingKubeDNS(ctx, c)
		if r.check("kube-proxy tables before (both nodes)", fmt.Sprintf("%d lines", strings.Count(before, "\n")), err) {
			readmeCases(ctx, c, r, before)
		}
		return
	}
	// kube-dns at three pods, spread and rolled under load through the cache (kubedns.go), on an install of the
	// manifests of its own. It changes kube-dns's endpoints, which every kube-proxy comparison below holds fixed,
	// so it runs before the first snapshot and leaves kube-dns as setupCluster made it. What it measures is our
	// forward against kube-dns's pods, the same behind either kube-proxy mode's DNAT: it runs in the nftables mode
	// only (about 300 s), unless asked for alone.
	if c.mode == "nftables" || os.Getenv("CLUSTER_ONLY") == "kube-dns" {
		kubeDNSCases(ctx, c, r)
	}
	if os.Getenv("CLUSTER_ONLY") == "kube-dns" {
		return
	}
	// Every overlay and the base validate against the real API server.
	for _, o := range []string{"base", "iptables-or-nftables", "ipvs", "ipv6", "dual-stack"} {
		r.check("dry-run=server "+o, "", dryRun(ctx, c, o))
	}
	before, err := snapshotKubeProxy(ctx, c)
	if !r.check("kube-proxy tables before (both nodes)", fmt.Sprintf("%d lines", strings.Count(before, "\n")), err) {
		return
	}

	// Our manifests, as a user applies them.
	start := time.Now()
	err = applyUserManifests(ctx, c)
	ready := r.check("apply "+userOverlay+" and DaemonSet Ready on both nodes", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err)
	if ready {
		r.figure("manifests applied to DaemonSet Ready", "%.1f s", time.Since(start).Seconds())
		r.check("securityContext enforced", "", checkSecurityContext(ctx, c))
		r.check("health and ready endpoints (both nodes)", "", checkHealth(ctx, c, true))
		steady, err := settledKubeProxy(ctx, c)
		if r.check("kube-proxy tables with the cache running", "", err) {
			dnsCases(ctx, c, r, "")
			configMapCases(ctx, c, r)
			lifecycleCases(ctx, c, r)
			after, err := snapshotKubeProxy(ctx, c)
			if err == nil && after != steady {
				err = fmt.Errorf("kube-proxy's tables changed while only nodelocaldns ran:\n%s", diff(steady, after))
			}
			r.check("kube-proxy tables untouched", "", err)
		}
	} else {
		r.fail("cases with the cache", errors.New("not run: the DaemonSet never became Ready"))
	}
	uninstallCases(ctx, c, r, before) // delete -k, as an uninstall without hooks (uninstall.go)

	// The drop-in promise: the upstream-shaped DaemonSet with only the image swapped.
	std, err := os.ReadFile(filepath.Join(c.cfg.repo, "test/cluster/manifests/standard-daemonset.yaml"))
	if err != nil {
		r.fail("standard DaemonSet", err)
		return
	}
	start = time.Now()
	text, err := applyStandard(ctx, c, string(std))
	if r.check("standard DaemonSet (image swapped) Ready", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
		r.check("standard: health endpoint", "", checkHealth(ctx, c, false))
		dnsCases(ctx, c, r, "standard: ")
	}
	if text != "" {
		r.check("standard: delete leaves nothing of ours"+leftNote(c), "", deleteStandard(ctx, c, text, before))
	}
	// The one command that removes the fallback (the next mode starts on a fresh cluster anyway).
	fallbackCase(c, r, "nodelocaldns -teardown removes the fallback table on both nodes", func() error {
		return teardownRemovesFallback(ctx, c, before)
	})
	// The Helm chart, on nodes where nothing of ours is left (helmcases.go).
	helmCases(ctx, c, r, before)
	// Who is asking: -top without and with pod identity, and its RBAC, through the chart (clients.go); and
	// README.md's install, word for word, on nodes where nothing of ours is left (readme.go). Neither depends on
	// kube-proxy's mode (the agent's accounting, the README's commands): the nftables mode runs them, to keep the
	// suite within CI's time.
	if c.mode == "nftables" {
		clientsCases(ctx, c, r, before)
		readmeCases(ctx, c, r, before)
	}
	// Last: a node's first start, emulated, and the start-up gate; node-1 is restarted (firststart.go).
	firstStartCases(ctx, c, r)
}

// kubeProxyServingKubeDNS is kube-proxy's state once it serves kube-dns's endpoints and has settled: the "before"
// of a branch that starts its cases at once. Right after setupCluster, kube-proxy may still reject the kube-dns
// ClusterIP (no endpoints yet), and the uninstall checks would then compare with that passing state.
func kubeProxyServingKubeDNS(ctx context.Context, c *cluster) (string, error) {
	var snap string
	err := poll(ctx, 90*time.Second, time.Second, func() (bool, error) {
		var err error
		snap, err = settledKubeProxy(ctx, c)
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(snap, "\n") {
			if strings.Contains(l, "kube-dns") && strings.Contains(strings.ToLower(l), "reject") {
				return false, fmt.Errorf("kube-proxy still rejects kube-dns: %s", l)
			}
		}
		return true, nil
	})
	return snap, err
}

// leftNote names what the "leaves nothing" cases allow to stay.
func leftNote(c *cluster) string {
	if left := c.leftTables(); len(left) > 0 {
		return " but table " + strings.Join(left, ", ")
	}
	return ""
}

// fallbackCase runs a case that needs the link-local fallback, or records it as skipped when the build lacks it.
func fallbackCase(c *cluster, r *results, name string, f func() error) {
	if !c.fallback {
		r.skip(name, noFallback)
		return
	}
	r.check(name, "", f())
}

func setupCluster(ctx context.Context, c *cluster) error {
	for _, f := range []string{"kube-dns.yaml", "clients.yaml"} {
		if _, err := c.kubectl(ctx, "apply", "-f", filepath.Join(c.cfg.repo, "test/cluster/manifests", f)); err != nil {
			return err
		}
	}
	if _, err := c.kubectl(ctx, "-n", "kube-system", "rollout", "status", "deploy/coredns", "--timeout=180s"); err != nil {
		return fmt.Errorf("kube-dns: %w", err)
	}
	for _, p := range []string{"dns-client", "dns-client-hostnet", "dns-client-2"} {
		if _, err := c.kubectl(ctx, "wait", "--for=condition=Ready", "pod/"+p, "--timeout=120s"); err != nil {
			return err
		}
	}
	// Where the scheduler put them is the premise of every cross-node case: say so if it is not.
	out, err := c.kubectl(ctx, "get", "pods", "-A", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}`)
	if err != nil {
		return err
	}
	where := map[string]string{"coredns-": c.remote.name, "dns-client ": c.local.name,
		"dns-client-hostnet ": c.local.name, "dns-client-2 ": c.remote.name}
	for prefix, node := range where {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l+" ", prefix) && !strings.HasSuffix(l, " "+node) {
				return fmt.Errorf("pod %q is not on %s", l, node)
			}
		}
	}
	return nil
}

func dryRun(ctx context.Context, c *cluster, overlay string) error {
	text, err := render(ctx, c, overlay)
	if err != nil {
		return err
	}
	_, err = c.kubectlIn(ctx, text, "apply", "--dry-run=server", "-f", "-")
	return err
}

func applyUserManifests(ctx context.Context, c *cluster) error {
	text, err := render(ctx, c, userOverlay)
	if err == nil {
		text, err = withShortLease(text)
	}
	if err != nil {
		return err
	}
	if _, err := c.kubectlIn(ctx, text, "apply", "-f", "-"); err != nil {
		return err
	}
	return waitDaemonSet(ctx, c)
}

func waitDaemonSet(ctx context.Context, c *cluster) error {
	if _, err := c.kubectl(ctx, "-n", "kube-system", "rollout", "status", "ds/node-local-dns", "--timeout=180s"); err != nil {
		logs, _ := c.kubectl(ctx, "-n", "kube-system", "logs", "ds/node-local-dns", "--tail=30")
		return fmt.Errorf("%w\nagent log:\n%s", err, logs)
	}
	return nil
}

func deleteUserManifests(ctx context.Context, c *cluster, before string) error {
	if _, err := c.kubectl(ctx, "delete", "-k", kustomizeDir(c.cfg.repo, userOverlay), "--wait=true", "--timeout=120s"); err != nil {
		return err
	}
	return checkNothingLeft(ctx, c, before)
}

func applyStandard(ctx context.Context, c *cluster, std string) (string, error) {
	out, err := c.kubectl(ctx, "kustomize", kustomizeDir(c.cfg.repo, "base"))
	if err != nil {
		return "", err
	}
	text, err := withStandardDaemonSet(out, std)
	if err != nil {
		return "", err
	}
	text = substitute(text, stdSubst)
	if _, err := c.kubectlIn(ctx, text, "apply", "-f", "-"); err != nil {
		return text, err
	}
	return text, waitDaemonSet(ctx, c)
}

func deleteStandard(ctx context.Context, c *cluster, text, before string) error {
	if _, err := c.kubectlIn(ctx, text, "delete", "-f", "-", "--wait=true", "--timeout=120s"); err != nil {
		return err
	}
	return checkNothingLeft(ctx, c, before)
}

// checkNothingLeft: once the DaemonSet's pods are gone, no table of ours (but the fallback's, when the build has
// it) and no interface of ours is left on either node, and kube-proxy's tables come back to what they were before
// our manifests (their Service gone too).
func checkNothingLeft(ctx context.Context, c *cluster, before string) error {
	if err := poll(ctx, 90*time.Second, time.Second, func() (bool, error) {
		out, err := c.kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "k8s-app=node-local-dns", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", err
	}); err != nil {
		return fmt.Errorf("agent pod still there: %w", err)
	}
	var problems []string
	for _, n := range c.nodes() {
		t, err := ourTables(ctx, n)
		t = slices.DeleteFunc(t, func(s string) bool { return slices.Contains(c.leftTables(), s) })
		if err != nil || len(t) > 0 {
			problems = append(problems, fmt.Sprintf("%s: tables left: %v %v", n.name, t, err))
		}
		if l, err := ourLinks(ctx, n); err != nil || len(l) > 0 {
			problems = append(problems, fmt.Sprintf("%s: interfaces left: %v %v", n.name, l, err))
		}
	}
	var now string
	err := poll(ctx, 60*time.Second, time.Second, func() (bool, error) {
		var err error
		now, err = snapshotKubeProxy(ctx, c)
		return err == nil && now == before, err
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("kube-proxy's tables differ from before the manifests:\n%s", diff(before, now)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}
