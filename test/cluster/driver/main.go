// Command driver runs the test-cluster suite: for each kube-proxy mode it brings up a two-node cluster (node.sh),
// applies the project's manifests as a user would, runs the cases and tears the cluster down, also on failure or
// on a signal. It prints one line per case, the figures it measured, and closes with `cluster: N passed, N failed`
// (and how many were skipped, when a case needs what the image under test lacks).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	flag.StringVar(&cfg.repo, "repo", "", "repository root (deploy/ lives there)")
	flag.StringVar(&cfg.state, "state", "", "state directory for the node (emptied first)")
	flag.StringVar(&cfg.k8sBin, "k8s-bin", "", "directory with the Kubernetes binaries and etcd")
	flag.StringVar(&cfg.debRoot, "deb-root", "", "root of the extracted Debian packages (containerd, runc, CNI plugins)")
	flag.StringVar(&cfg.images, "images", "", "directory of image tarballs to import")
	flag.StringVar(&cfg.dnsq, "dnsq", "", "the dnsq binary (stub upstream servers, host-side queries)")
	flag.StringVar(&cfg.agent, "agent", "", "the agent binary in the image under test (make image)")
	modes := flag.String("modes", "nftables,iptables", "kube-proxy modes to run the suite against (none if empty)")
	lanes := flag.Int("lanes", 1, "clusters to run at once (each mode and each conformance run is a cluster of its own)")
	cc := conformanceFlags()
	flag.Parse()
	runs, err := cc.selected()
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver:", err)
		return 2
	}
	if cfg.repo == "" || cfg.state == "" || cfg.k8sBin == "" || cfg.debRoot == "" || cfg.images == "" || cfg.dnsq == "" || cfg.agent == "" {
		fmt.Fprintln(os.Stderr, "driver: -repo, -state, -k8s-bin, -deb-root, -images, -dnsq and -agent are required")
		return 2
	}
	fallback, err := hasFallback(cfg.agent)
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver:", err)
		return 2
	}
	fmt.Printf("link-local fallback in this build: %v (the evidence: %s)\n", fallback, fallbackEvidence)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var all results
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		fmt.Println("SKIP kube-proxy mode ipvs: this kernel has no IPVS (no /proc/net/ip_vs)")
	}
	// Each mode and each conformance run on a cluster of its own, up to -lanes of them at once (lanes.go).
	var units []unit
	for _, mode := range strings.Split(*modes, ",") {
		if mode == "" {
			continue
		}
		units = append(units, unit{mode, func(out io.Writer) *results {
			return runMode(ctx, cfg, mode, filepath.Join(cfg.state, mode), fallback, out)
		}})
	}
	// Kubernetes' own DNS conformance specs, one cluster per run (conformance.go).
	for _, run := range runs {
		units = append(units, unit{"conformance-" + run.name, func(out io.Writer) *results {
			return runConformance(ctx, cfg, cc, run, filepath.Join(cfg.state, "conformance-"+run.name), out)
		}})
	}
	for _, r := range runLanes(ctx, units, *lanes, os.Stdout) {
		if r != nil {
			all.merge(r)
		}
	}
	fmt.Println()
	all.printFigures()
	all.printFailures(os.Stdout)
	if ctx.Err() != nil {
		fmt.Println("interrupted")
	}
	fmt.Println(all.total())
	if err := all.writeSummary(filepath.Join(cfg.state, "summary.txt")); err != nil {
		fmt.Println("driver: the summary:", err)
	}
	if all.failed > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}

// runMode brings the cluster up in one kube-proxy mode, runs the suite and always tears the cluster down.
func runMode(ctx context.Context, cfg config, mode, state string, fallback bool, out io.Writer) *results {
	r := &results{mode: mode, out: out}
	r.printf("== kube-proxy mode %s\n", mode)
	if err := os.RemoveAll(state); err != nil {
		r.fail("cluster up", err)
		return r
	}
	c := newCluster(cfg, mode, state)
	c.fallback = fallback
	c.out = out
	modeStart := time.Now()
	defer func() {
		start := time.Now()
		if err := c.down(); err != nil {
			r.printf("   warning: cluster down: %v\n", err)
		}
		r.figure("cluster teardown", "%.1f s", time.Since(start).Seconds())
		r.figure("whole mode (cluster up to torn down)", "%.0f s", time.Since(modeStart).Seconds())
	}()
	start := time.Now()
	if err := c.up(ctx); err != nil {
		r.fail("cluster up", fmt.Errorf("%w (logs in %s/logs and %s/node-2/logs)", err, state, state))
		return r
	}
	r.pass("cluster up", fmt.Sprintf("%.1f s: etcd, apiserver, controller-manager, scheduler; two nodes with containerd, kubelet, kube-proxy %s", time.Since(start).Seconds(), mode))
	r.figure("cluster up (both nodes Ready)", "%.1f s", time.Since(start).Seconds())
	suite(ctx, c, r)
	return r
}
