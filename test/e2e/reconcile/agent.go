package reconcile

import (
	"bufio"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The IP plan (see the package comment) and the agent's names.
const (
	LinkName        = "nodelocaldns"
	TableName       = "nodelocaldns" // in the inet family
	LocalIP         = "169.254.20.10"
	ClusterIP       = "10.96.0.10"
	UpstreamAddr    = "127.0.0.53:53"
	UpstreamReply   = "192.0.2.53"
	Domain          = "cluster.local"
	passesMetric    = "nodelocaldns_reconcile_passes_total"
	passCountMetric = "nodelocaldns_reconcile_duration_seconds_count"
)

// LocalIPs are the agent's -localip values.
func LocalIPs() []netip.Addr {
	return []netip.Addr{netip.MustParseAddr(LocalIP), netip.MustParseAddr(ClusterIP)}
}

// Args are the agent's flags: node-cache's, with the safety-net pass an hour away.
func Args() []string {
	return []string{"-localip", LocalIP + "," + ClusterIP, "-upstreamsvc", "kube-dns-upstream", "-syncinterval", "1h"}
}

// Env is the agent's environment: kube-dns-upstream's ClusterIP, and kube-dns's for the link-local fallback.
func Env() []string {
	return []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + strings.Split(UpstreamAddr, ":")[0], "KUBE_DNS_SERVICE_HOST=" + ClusterIP}
}

// StartAgent starts the test upstream and the agent, and waits until it is ready.
func StartAgent(t testing.TB) *harness.Agent {
	t.Helper()
	harness.StartUpstream(t, UpstreamAddr, UpstreamReply)
	a := harness.Start(t, harness.Config{
		Args:         Args(),
		BaseCorefile: harness.StandardCorefile(LocalIP, ClusterIP, Domain),
		Env:          Env(),
	})
	// Registered after the harness's SIGKILL, so it runs first: a clean stop removes the table and the
	// interface, and the next agent of the package starts from nothing.
	t.Cleanup(func() { a.Stop(10 * time.Second) })
	a.WaitReady()
	return a
}

// PrintRules is the table the agent's flags and environment ask for, as `nodelocaldns -print-rules` prints it
// (without the link-local fallback's table, which it prints after it).
func PrintRules(t testing.TB) string {
	t.Helper()
	cmd := exec.Command(harness.Binary(t), append(Args(), "-print-rules")...)
	cmd.Env = append(os.Environ(), Env()...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nodelocaldns -print-rules: %v", err)
	}
	table, _, _ := strings.Cut(string(out), "\n# link-local fallback")
	return table
}

var counterValues = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// ListTable is `nft list table inet nodelocaldns` with counter values removed, comparable with -print-rules.
// ok is false when the table does not exist.
var progname = regexp.MustCompile(` # progname \S+`)

func ListTable() (string, bool) {
	out, err := exec.Command("nft", "list", "table", "inet", "nodelocaldns").Output()
	if err != nil {
		return "", false
	}
	// nft names the owning process after an owned table's name; -print-rules cannot know it.
	return progname.ReplaceAllString(counterValues.ReplaceAllString(string(out), "counter"), ""), true
}

// PassStats are the agent's reconcile passes as its metrics count them.
type PassStats struct {
	// ByLabel is nodelocaldns_reconcile_passes_total by its labels (`result="repaired",trigger="nft"`). A pass
	// asked for by several kinds of trigger counts under each.
	ByLabel map[string]float64
	// Total is the number of passes: the count of the pass duration histogram.
	Total float64
}

// Passes scrapes the agent's reconcile pass metrics.
func Passes(a *harness.Agent) (PassStats, error) {
	p := PassStats{ByLabel: map[string]float64{}}
	resp, err := http.Get("http://" + a.Metrics + "/metrics")
	if err != nil {
		return p, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		labels, isPass := strings.CutPrefix(series, passesMetric+"{")
		if !ok || (!isPass && series != passCountMetric) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			return p, fmt.Errorf("parse %q: %w", sc.Text(), err)
		}
		if isPass {
			p.ByLabel[strings.TrimSuffix(labels, "}")] = v
		} else {
			p.Total = v
		}
	}
	return p, sc.Err()
}

// Count sums the passes whose labels contain every one of match (e.g. `result="repaired"`).
func (p PassStats) Count(match ...string) float64 {
	var n float64
	for labels, v := range p.ByLabel {
		all := true
		for _, m := range match {
			all = all && strings.Contains(labels, m)
		}
		if all {
			n += v
		}
	}
	return n
}

// Quiesce waits until the agent's pass count has not moved for quiet, and returns the passes then.
func Quiesce(a *harness.Agent, quiet, timeout time.Duration) (PassStats, error) {
	deadline := time.Now().Add(timeout)
	last, err := Passes(a)
	if err != nil {
		return last, err
	}
	since := time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			return last, fmt.Errorf("agent still running passes after %v: %v", timeout, last)
		}
		time.Sleep(quiet / 5)
		p, err := Passes(a)
		if err != nil {
			return p, err
		}
		if p.Total != last.Total {
			last, since = p, time.Now()
		}
	}
	return last, nil
}

// AfterRepair waits until the agent has counted a repairing pass since before (the observer may see the kernel
// whole a moment before the agent's pass ends and counts itself), then until it is idle again.
func AfterRepair(a *harness.Agent, before PassStats, quiet, timeout time.Duration) (PassStats, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := Passes(a)
		if err != nil {
			return p, err
		}
		if p.Count(`result="repaired"`) > before.Count(`result="repaired"`) {
			return Quiesce(a, quiet, time.Until(deadline))
		}
		if time.Now().After(deadline) {
			return p, fmt.Errorf("no repairing pass counted within %v (before %v, now %v)", timeout, before, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
