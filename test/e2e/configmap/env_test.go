package configmap

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Conventions. The agent listens on localIP and dnsServer (the interface it creates lives in this package's
// throwaway namespace). Every upstream is a harness.Upstream on its own loopback address that answers every A
// query with its own 192.0.2.x address, so an answer names the server it came from. Each test uses its own
// 127.0.<test>.0/24 (see ip), so no test ever binds an address an earlier test's server used:
//
//	127.0.N.53  kube-dns-upstream (KUBE_DNS_UPSTREAM_SERVICE_HOST): cluster.local and the reverse zones -> 192.0.2.53
//	127.0.N.54  stub server A                                                                      -> 192.0.2.54
//	127.0.N.56  stub server B                                                                      -> 192.0.2.56
//	127.0.N.55  upstreamNameservers X ("." block)                                                   -> 192.0.2.55
//	127.0.N.57  upstreamNameservers Y ("." block)                                                   -> 192.0.2.57
//
// Each lookup asks for a name never asked before (q<n>.<domain>), so CoreDNS's cache cannot hide which
// configuration served it.
const (
	localIP   = "169.254.20.10"
	dnsServer = "10.96.0.10"
	domain    = "cluster.local"
	dnsAddr   = localIP + ":53"
	healthURL = "http://" + localIP + ":8080/health"

	// Upstreams, as the last octet of their address; ip gives the address.
	clusterUp = "53"
	stubA     = "54"
	stubB     = "56"
	upX       = "55"
	upY       = "57"

	ansCluster = "192.0.2.53"
	ansStubA   = "192.0.2.54"
	ansStubB   = "192.0.2.56"
	ansUpX     = "192.0.2.55"
	ansUpY     = "192.0.2.57"

	// Metric series.
	configmapErrors = `coredns_nodecache_setup_errors_total{errortype="configmap"}`
	reloadsOK       = `nodelocaldns_corefile_reloads_total{result="reloaded"}`
	reloadsSame     = `nodelocaldns_corefile_reloads_total{result="unchanged"}`
	reloadsError    = `nodelocaldns_corefile_reloads_total{result="error"}`

	// applyTimeout bounds a wait for a change to take effect: a bound, not the target (well under a second, which
	// `make bench-configmap` measures). The race stage's agent, built with -race beside the VM and the cluster
	// builds, can take seconds to reload.
	applyTimeout = 30 * time.Second
	// queryTimeout is how long a query may take before it counts as lost: a lost datagram is never answered, a
	// starved agent answers late, and only the first is a failure.
	queryTimeout = 5 * time.Second
	// trafficTimeout bounds a wait for traffic a test needs (queries, probes): only a stalled client reaches it.
	trafficTimeout = 30 * time.Second
)

// env is one running agent with its two ConfigMap volumes and the upstreams above.
type env struct {
	t       *testing.T
	agent   *harness.Agent
	kubeDNS *harness.ConfigMapVolume // kube-dns ConfigMap: stubDomains, upstreamNameservers
	base    *harness.ConfigMapVolume // node-local-dns ConfigMap: Corefile.base
	kdDir   string                   // -kubednscm
	ups     map[string]*harness.Upstream
	seq     atomic.Int64
}

// setup describes an agent to start.
type setup struct {
	kubeDNS    map[string]string   // initial kube-dns ConfigMap data; nil = empty volume
	noKubeDNS  bool                // -kubednscm names a directory that does not exist yet
	args       []string            // extra flags
	baseDomain string              // zone of the first block of Corefile.base; "" = cluster.local
	baseEdit   func(string) string // edits the standard Corefile.base; nil = none
}

func start(t *testing.T, s setup) *env {
	t.Helper()
	testenv.RequireRoot(t)
	e := &env{t: t, ups: map[string]*harness.Upstream{}}
	for addr, ans := range map[string]string{clusterUp: ansCluster, stubA: ansStubA, stubB: ansStubB, upX: ansUpX, upY: ansUpY} {
		e.ups[addr] = harness.StartUpstream(t, ip(addr)+":53", ans)
	}
	t.Cleanup(func() { testBlock.Add(1) })
	dir := t.TempDir()
	e.kdDir = filepath.Join(dir, "kube-dns")
	if !s.noKubeDNS {
		e.kubeDNS = harness.NewConfigMapVolume(t, e.kdDir, s.kubeDNS)
	}
	if s.baseDomain == "" {
		s.baseDomain = domain
	}
	base := harness.StandardCorefile(localIP, dnsServer, s.baseDomain)
	if s.baseEdit != nil {
		base = s.baseEdit(base)
	}
	e.base = harness.NewConfigMapVolume(t, filepath.Join(dir, "node-local-dns"), map[string]string{"Corefile.base": base})
	args := append([]string{
		"-localip", localIP + "," + dnsServer,
		"-basecorefile", filepath.Join(e.base.Dir, "Corefile.base"),
		"-kubednscm", e.kdDir,
		"-upstreamsvc", "kube-dns-upstream",
	}, s.args...)
	cfg := harness.Config{Args: args, Env: []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + ip(clusterUp)}}
	if p := os.Getenv("NODELOCALDNS_AGENT_LOG"); p != "" { // debugging: a copy of the agent's log
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		cfg.Stderr = f
	}
	e.agent = harness.Start(t, cfg)
	// A graceful stop, so the next test finds no table or interface left behind; it runs before the harness's kill.
	t.Cleanup(func() {
		if code := e.agent.Stop(30 * time.Second); code != 0 {
			t.Errorf("agent exited with code %d", code)
		}
	})
	e.agent.WaitReady()
	return e
}

// testBlock is one less than the third octet of the current test's upstream addresses; start moves it on when a
// test ends.
var testBlock atomic.Int32

// ip returns the current test's address of the upstream with last octet host.
func ip(host string) string { return fmt.Sprintf("127.0.%d.%s", testBlock.Load()+1, host) }

// stubs renders a stubDomains value; servers are given as upstream octets.
func stubs(m map[string][]string) string {
	out := map[string][]string{}
	for d, hosts := range m {
		for _, h := range hosts {
			out[d] = append(out[d], ip(h))
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// upstreams renders an upstreamNameservers value; servers are given as upstream octets.
func upstreams(hosts ...string) string {
	servers := make([]string, len(hosts))
	for i, h := range hosts {
		servers[i] = ip(h)
	}
	b, _ := json.Marshal(servers)
	return string(b)
}

// updateKubeDNS replaces the kube-dns ConfigMap and returns the moment just before the update began (the ..data
// rename follows within microseconds).
func (e *env) updateKubeDNS(data map[string]string) time.Time {
	e.t.Helper()
	t0 := time.Now()
	e.kubeDNS.Update(e.t, data)
	return t0
}

// lookup asks the agent for a fresh name under zone over UDP.
func (e *env) lookup(zone string) (string, error) {
	name := fmt.Sprintf("q%d.%s", e.seq.Add(1), zone)
	return harness.Lookup(dnsAddr, "udp", name, queryTimeout)
}

// waitAnswer waits until a fresh name under zone is answered with want, and returns the time since t0.
func (e *env) waitAnswer(t0 time.Time, zone, want string) time.Duration {
	e.t.Helper()
	testenv.EventuallyNil(e.t, applyTimeout, zone+" answered by "+want, func() error {
		got, err := e.lookup(zone)
		if err == nil && got == want {
			return nil
		}
		return fmt.Errorf("got %q, %v; Corefile:\n%s", got, err, e.corefile())
	})
	return time.Since(t0)
}

// expectAnswer fails unless a fresh name under zone is answered with want right now.
func (e *env) expectAnswer(zone, want string) {
	e.t.Helper()
	got, err := e.lookup(zone)
	if err != nil || got != want {
		e.t.Fatalf("lookup under %s: got %q, %v; want %s\nCorefile:\n%s", zone, got, err, want, e.corefile())
	}
}

// metric returns a series' value, 0 when it does not exist yet.
func (e *env) metric(series string) float64 {
	e.t.Helper()
	v, _ := e.agent.Metric(series)
	return v
}

// waitMetric waits until series exceeds before and returns its value.
func (e *env) waitMetric(series string, before float64) float64 {
	e.t.Helper()
	var v float64
	testenv.Eventually(e.t, applyTimeout, series+" to increase", func() bool {
		v = e.metric(series)
		return v > before
	})
	return v
}

// corefile is the Corefile the agent last wrote for operators (-conf).
func (e *env) corefile() string {
	b, _ := os.ReadFile(filepath.Join(e.agent.Dir, "Corefile"))
	return string(b)
}

// logsSince returns the messages of the log lines after the first n.
func (e *env) logsSince(n int, msg string) []harness.LogLine {
	var out []harness.LogLine
	for _, l := range e.agent.Lines()[n:] {
		if l.Msg == msg {
			out = append(out, l)
		}
	}
	return out
}

// health reports whether the liveness endpoint answers 200 within timeout.
func health(c *http.Client) error {
	resp, err := c.Get(healthURL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// oneOf reports whether got is among want.
func oneOf(got string, want ...string) bool { return slices.Contains(want, got) }
