package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// suite runs the cases of one mode against a node that is up. Cases that need an earlier step (the DaemonSet
// Ready) are counted as failed with that reason when the step failed, so a broken start cannot pass quietly.
func suite(ctx context.Context, n *node, r *results) {
	if !r.check("cluster DNS and clients", "", setupCluster(ctx, n)) {
		return
	}
	// Every overlay and the base validate against the real API server.
	for _, o := range []string{"base", "iptables-or-nftables", "ipvs", "ipv6", "dual-stack"} {
		r.check("dry-run=server "+o, "", dryRun(ctx, n, o))
	}
	before, err := snapshotKubeProxy(ctx, n)
	if !r.check("kube-proxy tables before", fmt.Sprintf("%d lines", strings.Count(before, "\n")), err) {
		return
	}

	// Our manifests, as a user applies them.
	start := time.Now()
	err = applyUserManifests(ctx, n)
	ready := r.check("apply "+userOverlay+" and DaemonSet Ready", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err)
	if ready {
		r.check("securityContext enforced", "", checkSecurityContext(ctx, n))
		r.check("health and ready endpoints", "", checkHealth(ctx, n, true))
		steady, err := settledKubeProxy(ctx, n)
		if r.check("kube-proxy tables with the cache running", "", err) {
			dnsCases(ctx, n, r, "")
			configMapCases(ctx, n, r)
			lifecycleCases(ctx, n, r)
			after, err := snapshotKubeProxy(ctx, n)
			if err == nil && after != steady {
				err = fmt.Errorf("kube-proxy's tables changed while only nodelocaldns ran:\n%s", diff(steady, after))
			}
			r.check("kube-proxy tables untouched", "", err)
		}
	} else {
		r.fail("cases with the cache", errors.New("not run: the DaemonSet never became Ready"))
	}
	r.check("delete -k "+userOverlay+" leaves nothing", "", deleteUserManifests(ctx, n, before))

	// The drop-in promise: the upstream-shaped DaemonSet with only the image swapped.
	std, err := os.ReadFile(filepath.Join(n.cfg.repo, "test/cluster/manifests/standard-daemonset.yaml"))
	if err != nil {
		r.fail("standard DaemonSet", err)
		return
	}
	start = time.Now()
	text, err := applyStandard(ctx, n, string(std))
	if r.check("standard DaemonSet (image swapped) Ready", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
		r.check("standard: health endpoint", "", checkHealth(ctx, n, false))
		dnsCases(ctx, n, r, "standard: ")
	}
	if text != "" {
		r.check("standard: delete leaves nothing", "", deleteStandard(ctx, n, text, before))
	}
}

func setupCluster(ctx context.Context, n *node) error {
	for _, f := range []string{"kube-dns.yaml", "clients.yaml"} {
		if _, err := n.kubectl(ctx, "apply", "-f", filepath.Join(n.cfg.repo, "test/cluster/manifests", f)); err != nil {
			return err
		}
	}
	if _, err := n.kubectl(ctx, "-n", "kube-system", "rollout", "status", "deploy/coredns", "--timeout=180s"); err != nil {
		return fmt.Errorf("kube-dns: %w", err)
	}
	for _, p := range []string{"dns-client", "dns-client-hostnet"} {
		if _, err := n.kubectl(ctx, "wait", "--for=condition=Ready", "pod/"+p, "--timeout=120s"); err != nil {
			return err
		}
	}
	return nil
}

func dryRun(ctx context.Context, n *node, overlay string) error {
	text, err := render(ctx, n, overlay)
	if err != nil {
		return err
	}
	_, err = n.kubectlIn(ctx, text, "apply", "--dry-run=server", "-f", "-")
	return err
}

func applyUserManifests(ctx context.Context, n *node) error {
	text, err := render(ctx, n, userOverlay)
	if err != nil {
		return err
	}
	if _, err := n.kubectlIn(ctx, text, "apply", "-f", "-"); err != nil {
		return err
	}
	return waitDaemonSet(ctx, n)
}

func waitDaemonSet(ctx context.Context, n *node) error {
	if _, err := n.kubectl(ctx, "-n", "kube-system", "rollout", "status", "ds/node-local-dns", "--timeout=180s"); err != nil {
		logs, _ := n.kubectl(ctx, "-n", "kube-system", "logs", "ds/node-local-dns", "--tail=30")
		return fmt.Errorf("%w\nagent log:\n%s", err, logs)
	}
	return nil
}

func deleteUserManifests(ctx context.Context, n *node, before string) error {
	if _, err := n.kubectl(ctx, "delete", "-k", kustomizeDir(n.cfg.repo, userOverlay), "--wait=true", "--timeout=120s"); err != nil {
		return err
	}
	return checkNothingLeft(ctx, n, before)
}

func applyStandard(ctx context.Context, n *node, std string) (string, error) {
	out, err := n.kubectl(ctx, "kustomize", kustomizeDir(n.cfg.repo, "base"))
	if err != nil {
		return "", err
	}
	text, err := withStandardDaemonSet(out, std)
	if err != nil {
		return "", err
	}
	text = substitute(text, stdSubst)
	if _, err := n.kubectlIn(ctx, text, "apply", "-f", "-"); err != nil {
		return text, err
	}
	return text, waitDaemonSet(ctx, n)
}

func deleteStandard(ctx context.Context, n *node, text, before string) error {
	if _, err := n.kubectlIn(ctx, text, "delete", "-f", "-", "--wait=true", "--timeout=120s"); err != nil {
		return err
	}
	return checkNothingLeft(ctx, n, before)
}

// checkNothingLeft: once the DaemonSet's pod is gone, no table of ours and no interface of ours is left, and
// kube-proxy's tables come back to what they were before our manifests (their Service gone too).
func checkNothingLeft(ctx context.Context, n *node, before string) error {
	if err := poll(ctx, 90*time.Second, time.Second, func() (bool, error) {
		out, err := n.kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "k8s-app=node-local-dns", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", err
	}); err != nil {
		return fmt.Errorf("agent pod still there: %w", err)
	}
	var problems []string
	if t, err := ourTables(ctx, n); err != nil || len(t) > 0 {
		problems = append(problems, fmt.Sprintf("tables left: %v %v", t, err))
	}
	if l, err := ourLinks(ctx, n); err != nil || len(l) > 0 {
		problems = append(problems, fmt.Sprintf("interfaces left: %v %v", l, err))
	}
	var now string
	err := poll(ctx, 60*time.Second, time.Second, func() (bool, error) {
		var err error
		now, err = snapshotKubeProxy(ctx, n)
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
