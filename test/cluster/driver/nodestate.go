package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

var (
	nftCounter = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	iptCounter = regexp.MustCompile(`\[\d+:\d+\]`)
)

// snapshotKubeProxy is kube-proxy's own ruleset on every node, each line prefixed with the node's name.
func snapshotKubeProxy(ctx context.Context, c *cluster) (string, error) {
	var b strings.Builder
	for _, n := range c.nodes() {
		s, err := proxySnapshot(ctx, n, c.mode)
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(s, "\n") {
			fmt.Fprintf(&b, "%s: %s\n", n.name, l)
		}
	}
	return b.String(), nil
}

// staleServiceChain is an empty service chain of kube-proxy's nftables mode: a Service's chains are flushed when
// it goes and deleted at kube-proxy's next sync a second later or more (pkg/proxy/nftables: staleChains; kernels
// before 6.2 notice a chain unreferenced late), which may be a long time away on a cluster where nothing else
// changes. Empty, it sends nothing anywhere; a snapshot leaves it out.
var staleServiceChain = regexp.MustCompile(`(?m)^\tchain (service|endpoint)-[^ ]+ \{\n\t\}\n\n?`)

// withoutStaleChains is nft's listing of a table as if its stale service chains were gone: each with the blank
// line that separates it from the next, and the one left before the table's end when it was the last.
func withoutStaleChains(listing string) string {
	return strings.ReplaceAll(staleServiceChain.ReplaceAllString(listing, ""), "\n\n}", "\n}")
}

// proxySnapshot is kube-proxy's own ruleset on one node, counters stripped, stale (empty) service chains left out: its nftables tables in nftables
// mode, iptables-save and ip6tables-save (iptables-nft) in iptables mode. Our tables are never part of it.
func proxySnapshot(ctx context.Context, n *node, mode string) (string, error) {
	var b strings.Builder
	switch mode {
	case "nftables":
		tables, err := n.sh(ctx, "nft", "list", "tables")
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(tables, "\n") {
			f := strings.Fields(l)
			if len(f) != 3 || f[2] != "kube-proxy" {
				continue
			}
			out, err := n.sh(ctx, "nft", "list", "table", f[1], "kube-proxy")
			if err != nil {
				return "", err
			}
			b.WriteString(withoutStaleChains(nftCounter.ReplaceAllString(out, "counter")))
		}
		if b.Len() == 0 {
			return "", fmt.Errorf("%s: kube-proxy has no nftables table", n.name)
		}
	default:
		// Sorted: when a Service comes back with a new ClusterIP, kube-proxy writes the same rules in another
		// order (seen after the standard DaemonSet's delete: same lines, different order), so compare contents.
		var lines []string
		for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
			out, err := n.sh(ctx, cmd)
			if err != nil {
				return "", err
			}
			for _, l := range strings.Split(out, "\n") {
				if !strings.HasPrefix(l, "#") {
					lines = append(lines, iptCounter.ReplaceAllString(l, ""))
				}
			}
		}
		sort.Strings(lines)
		b.WriteString(strings.Join(lines, "\n"))
	}
	return b.String(), nil
}

// settledKubeProxy waits until two snapshots a few seconds apart agree (kube-proxy has synced the Services our
// manifests added) and returns it.
func settledKubeProxy(ctx context.Context, c *cluster) (string, error) {
	var last string
	err := poll(ctx, 60*time.Second, 3*time.Second, func() (bool, error) {
		s, err := snapshotKubeProxy(ctx, c)
		if err != nil {
			return false, err
		}
		same := s == last
		last = s
		return same, nil
	})
	return last, err
}

// ourTables lists nftables tables whose name starts with ourTablePrefix, as "family name".
func ourTables(ctx context.Context, n *node) ([]string, error) {
	out, err := n.sh(ctx, "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	var t []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "table" && strings.HasPrefix(f[2], ourTablePrefix) {
			t = append(t, f[1]+" "+f[2])
		}
	}
	return t, nil
}

func ourLinks(ctx context.Context, n *node) ([]string, error) {
	out, err := n.sh(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	var links []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			name := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
			if strings.HasPrefix(name, ourLinkPrefix) {
				links = append(links, name)
			}
		}
	}
	return links, nil
}

// conntrackDNS lists the conntrack entries for DNS (port 53, UDP and TCP) to dst.
func conntrackDNS(ctx context.Context, n *node, dst string) ([]string, error) {
	var found []string
	for _, proto := range []string{"udp", "tcp"} {
		out, err := n.sh(ctx, "conntrack", "-L", "-p", proto, "--orig-dst", dst, "--orig-port-dst", "53")
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				found = append(found, l)
			}
		}
	}
	return found, nil
}

// fromPorts splits conntrack entries into those whose original source port is one of sports (the flows of the
// queries sent from those ports) and the others.
func fromPorts(entries []string, sports []int) (ours, others []string) {
	from := map[string]bool{}
	for _, p := range sports {
		from[strconv.Itoa(p)] = true
	}
	for _, e := range entries {
		// The first sport= is the original direction's.
		if _, rest, ok := strings.Cut(e, " sport="); ok && from[strings.Fields(rest)[0]] {
			ours = append(ours, e)
		} else {
			others = append(others, e)
		}
	}
	return ours, others
}

// flushConntrackDNS deletes the conntrack entries for DNS to dst, so that a count after it sees only newer flows.
// conntrack exits 1 when there is nothing to delete; an entry it failed to delete shows in that count anyway.
func flushConntrackDNS(ctx context.Context, n *node, dst string) {
	for _, proto := range []string{"udp", "tcp"} {
		n.sh(ctx, "conntrack", "-D", "-p", proto, "--orig-dst", dst, "--orig-port-dst", "53")
	}
}

// agent is the running nodelocaldns pod on one node and its container as the runtime sees it.
type agent struct {
	pod, uid, containerID string
	restarts              int
	pid                   int
}

func currentAgent(ctx context.Context, c *cluster, n *node) (agent, error) {
	out, err := c.kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "k8s-app=node-local-dns",
		"--field-selector=status.phase=Running,spec.nodeName="+n.name, "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready} {.metadata.deletionTimestamp}{"\n"}{end}`)
	if err != nil {
		return agent{}, err
	}
	var found []agent
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 5 || f[4] != "true" { // ready, and no deletionTimestamp (a sixth field)
			continue
		}
		a := agent{pod: f[0], uid: f[1], containerID: strings.TrimPrefix(f[2], "containerd://")}
		a.restarts, _ = strconv.Atoi(f[3])
		found = append(found, a)
	}
	if len(found) != 1 {
		return agent{}, fmt.Errorf("want one ready agent pod on %s, have %d: %q", n.name, len(found), out)
	}
	a := found[0]
	tasks, err := n.ctr(ctx, "tasks", "ls")
	if err != nil {
		return a, err
	}
	for _, l := range strings.Split(tasks, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == a.containerID {
			a.pid, _ = strconv.Atoi(f[1])
		}
	}
	if a.pid == 0 {
		return a, fmt.Errorf("no runtime task for container %s on %s", a.containerID, n.name)
	}
	return a, nil
}

// checkSecurityContext reads what the kernel enforces on the agent process, not what the spec asks: effective
// and bounding capabilities exactly NET_ADMIN and NET_BIND_SERVICE, uid 0, no_new_privs, a read-only root.
func checkSecurityContext(ctx context.Context, c *cluster) error {
	a, err := currentAgent(ctx, c, c.local)
	if err != nil {
		return err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.pid))
	if err != nil {
		return err
	}
	const want = "0000000000001400" // CAP_NET_BIND_SERVICE (10) | CAP_NET_ADMIN (12)
	fields := map[string]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	var bad []string
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if fields[k] != want {
			bad = append(bad, fmt.Sprintf("%s %s, want %s", k, fields[k], want))
		}
	}
	if !strings.HasPrefix(fields["Uid"], "0\t") {
		bad = append(bad, "Uid "+fields["Uid"])
	}
	if fields["NoNewPrivs"] != "1" {
		bad = append(bad, "NoNewPrivs "+fields["NoNewPrivs"])
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", a.pid))
	if err != nil {
		return err
	}
	rootRO := false
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == "/" {
			rootRO = strings.HasPrefix(f[5], "ro")
		}
	}
	if !rootRO {
		bad = append(bad, "root filesystem writable")
	}
	if len(bad) > 0 {
		return fmt.Errorf("agent pid %d: %s", a.pid, strings.Join(bad, "; "))
	}
	return nil
}

// checkHealth asks the agent's health listener on the local IP from each node, as the kubelet's probes do.
func checkHealth(ctx context.Context, c *cluster, ready bool) error {
	paths := []string{"/health"}
	if ready {
		paths = append(paths, "/ready")
	}
	// Without a readiness probe (the standard DaemonSet) the pod is Ready when the container starts, before
	// the agent listens: give it the time its liveness probe's initialDelaySeconds would.
	for _, n := range c.nodes() {
		for _, p := range paths {
			if err := waitHTTP(ctx, n, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitHTTP polls path on the agent's health listener (the local IP, port 8080) from the node until it says 200.
func waitHTTP(ctx context.Context, n *node, path string) error {
	return poll(ctx, 30*time.Second, 500*time.Millisecond, func() (bool, error) {
		_, err := n.sh(ctx, "curl", "-sf", "-m", "5", "http://"+localDNSIP+":8080"+path)
		return err == nil, err
	})
}

// diff shows the lines only in a or only in b.
func diff(a, b string) string {
	in := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if mb[l] == 0 {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if ma[l] == 0 {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > 40 {
		out = append(out[:40], fmt.Sprintf("… %d more lines", len(out)-40))
	}
	return strings.Join(out, "\n")
}
