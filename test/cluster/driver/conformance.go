package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Kubernetes' own DNS conformance specs (e2e.test from k8s.io/kubernetes/test/e2e, focused on "[sig-network] DNS")
// against the cluster, through the cache. Each run is a cluster of its own: up, kube-dns, the cache as the run
// says, the suite, down. The suite's verdicts are its own (its JUnit report); the driver only counts them.

// conformanceRun is one run of the suite.
type conformanceRun struct {
	name       string
	mode       string // kube-proxy's
	kubeletDNS string // the kubelet's clusterDNS: the nameserver every pod's resolv.conf names
	cache      cacheKind
}

type cacheKind int

const (
	cacheNone      cacheKind = iota // the control: kube-dns through kube-proxy, as the suite is meant to run
	cacheManifests                  // the user's overlay (iptables-or-nftables), as the suite's other cases apply it
	cacheRolling                    // the Helm chart, upgraded back and forth for as long as the suite runs
)

// The runs, by name (-conformance). The cache intercepts the kube-dns ClusterIP in the first two, answers its
// link-local address in the third (the kubelet names it, as IPVS clusters do), and is rolled under the suite in
// the fourth; the control has no cache, so a spec that fails there fails for the harness, not for us.
var conformanceRuns = []conformanceRun{
	{name: "nftables", mode: "nftables", kubeletDNS: kubeDNSIP, cache: cacheManifests},
	{name: "iptables", mode: "iptables", kubeletDNS: kubeDNSIP, cache: cacheManifests},
	{name: "linklocal", mode: "nftables", kubeletDNS: localDNSIP, cache: cacheManifests},
	{name: "rolling", mode: "nftables", kubeletDNS: kubeDNSIP, cache: cacheRolling},
	{name: "control", mode: "nftables", kubeletDNS: kubeDNSIP, cache: cacheNone},
}

// conformanceConfig is what the runs need beyond the cluster's config: the suite, its images, which runs.
type conformanceConfig struct {
	e2e      string // directory with e2e.test (build-e2e.sh)
	images   string // directory with the suite's image tarballs (e2e-images.sh)
	repoList string // KUBE_TEST_REPO_LIST: the suite's registries, pointed at the imported images
	runs     string
}

func conformanceFlags() *conformanceConfig {
	cc := &conformanceConfig{}
	flag.StringVar(&cc.e2e, "e2e", "", "directory with e2e.test (test/cluster/build-e2e.sh)")
	flag.StringVar(&cc.images, "e2e-images", "", "directory with the e2e suite's image tarballs (test/cluster/e2e-images.sh)")
	flag.StringVar(&cc.repoList, "e2e-repo-list", "", "the suite's registry list (KUBE_TEST_REPO_LIST) naming those images")
	flag.StringVar(&cc.runs, "conformance", "", "DNS conformance runs, comma-separated: "+runNames()+" (none if empty)")
	return cc
}

func runNames() string {
	var n []string
	for _, r := range conformanceRuns {
		n = append(n, r.name)
	}
	return strings.Join(n, ",")
}

// selected returns the runs named in -conformance, in the order given, or an error naming an unknown one.
func (cc *conformanceConfig) selected() ([]conformanceRun, error) {
	var out []conformanceRun
	for _, name := range strings.Split(cc.runs, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		found := false
		for _, r := range conformanceRuns {
			if r.name == name {
				out = append(out, r)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-conformance: unknown run %q (known: %s)", name, runNames())
		}
	}
	if len(out) > 0 && (cc.e2e == "" || cc.images == "" || cc.repoList == "") {
		return nil, errors.New("-conformance needs -e2e, -e2e-images and -e2e-repo-list")
	}
	return out, nil
}

// runConformance brings up a cluster for one run, runs the suite there and always tears the cluster down.
func runConformance(ctx context.Context, cfg config, cc *conformanceConfig, run conformanceRun, state string, out io.Writer) *results {
	r := &results{mode: "conformance-" + run.name, out: out}
	r.printf("== DNS conformance run %s (kube-proxy %s, kubelet clusterDNS %s, %s)\n", run.name, run.mode, run.kubeletDNS, run.cache)
	if err := os.RemoveAll(state); err != nil {
		r.fail("cluster up", err)
		return r
	}
	// The nodes import the cluster's images and the suite's, joined in a directory of the run's own (runs may be
	// side by side).
	images, err := joinImageDirs(state+"-images", cfg.images, cc.images)
	if err != nil {
		r.fail("images", err)
		return r
	}
	cfg.images = images
	c := newCluster(cfg, run.mode, state)
	c.kubeletDNS = run.kubeletDNS
	c.out = out
	runStart := time.Now()
	defer func() {
		if err := c.down(); err != nil {
			r.printf("   warning: cluster down: %v\n", err)
		}
		r.figure("whole run (cluster up to torn down)", "%.0f s", time.Since(runStart).Seconds())
	}()
	if err := c.up(ctx); err != nil {
		r.fail("cluster up", fmt.Errorf("%w (logs in %s/logs and %s/node-2/logs)", err, state, state))
		return r
	}
	r.pass("cluster up", fmt.Sprintf("%.1f s", time.Since(runStart).Seconds()))
	if !r.check("kube-dns on node-2", "", setupKubeDNS(ctx, c)) {
		return r
	}
	var during func(stop <-chan struct{})
	switch run.cache {
	case cacheManifests:
		start := time.Now()
		err := applyUserManifests(ctx, c)
		if !r.check("apply "+userOverlay+" and DaemonSet Ready on both nodes", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
			return r
		}
	case cacheRolling:
		start := time.Now()
		h, err := newHelm(ctx, c)
		if err == nil {
			err = h.install(ctx, helmClusterValues)
		}
		if !r.check("helm install and DaemonSet Ready on both nodes", fmt.Sprintf("%.1f s", time.Since(start).Seconds()), err) {
			return r
		}
		during = func(stop <-chan struct{}) {
			r.check("helm upgrades roll the DaemonSet for as long as the suite runs", "", rollUntil(ctx, h, r, stop))
		}
	}
	before, err := cacheRequests(ctx, c, run.cache)
	if !r.check("the cache's request counters before the suite", "", err) {
		return r
	}
	sum, err := runE2E(ctx, c, cc, filepath.Join(state, "e2e"), during)
	if !r.check("e2e.test ran", "", err) {
		return r
	}
	sum.report(r)
	if run.cache == cacheManifests {
		// Nothing else asks DNS here (kube-dns forwards to its node's stub, the agent's loop probe runs at its
		// start): what the counters gained is the suite's queries, answered by the cache.
		after, err := cacheRequests(ctx, c, run.cache)
		var gained []string
		total := 0.0
		for _, n := range c.nodes() {
			d := after[n.name] - before[n.name]
			total += d
			gained = append(gained, fmt.Sprintf("%s +%.0f", n.name, d))
		}
		if err == nil && total <= 0 {
			err = errors.New("coredns_dns_requests_total did not move: the suite's queries did not reach the cache")
		}
		r.check("the suite's queries went through the cache (coredns_dns_requests_total on :9253)", strings.Join(gained, ", "), err)
	}
	return r
}

// cacheRequests sums the agent's coredns_dns_requests_total (every server block, protocol and type) on each node,
// read from the node itself (the agent runs with the host's network). Without a cache, or when the agent's pods
// are replaced under the suite (their counters start again), there is nothing to compare: it returns nil.
func cacheRequests(ctx context.Context, c *cluster, k cacheKind) (map[string]float64, error) {
	if k != cacheManifests {
		return nil, nil
	}
	m := map[string]float64{}
	for _, n := range c.nodes() {
		out, err := n.sh(ctx, "curl", "-sf", "-m", "5", "http://127.0.0.1:9253/metrics")
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(out, "\n") {
			if !strings.HasPrefix(l, "coredns_dns_requests_total{") {
				continue
			}
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: metrics line %q: %w", n.name, l, err)
			}
			m[n.name] += v
		}
	}
	return m, nil
}

func (k cacheKind) String() string {
	return [...]string{"no cache (control)", "the cache from " + userOverlay, "the cache from the Helm chart, rolled under the suite"}[k]
}

// setupKubeDNS applies the cluster DNS alone (no client pods: the suite brings its own).
func setupKubeDNS(ctx context.Context, c *cluster) error {
	if _, err := c.kubectl(ctx, "apply", "-f", filepath.Join(c.cfg.repo, "test/cluster/manifests/kube-dns.yaml")); err != nil {
		return err
	}
	_, err := c.kubectl(ctx, "-n", "kube-system", "rollout", "status", "deploy/coredns", "--timeout=180s")
	return err
}

// joinImageDirs makes dir hold a link to every tarball of the given directories (node.sh imports one directory).
func joinImageDirs(dir string, from ...string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, d := range from {
		tars, err := filepath.Glob(filepath.Join(d, "*.tar"))
		if err != nil {
			return "", err
		}
		if len(tars) == 0 {
			return "", fmt.Errorf("no image tarballs in %s", d)
		}
		for _, t := range tars {
			if err := os.Symlink(t, filepath.Join(dir, filepath.Base(t))); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}
