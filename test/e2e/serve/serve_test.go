// Package serve tests the agent end to end as a DNS server: the real binary, started with node-cache's flags in
// a throwaway network namespace, queried with a DNS client library.
//
// Conventions: the agent listens on 127.0.0.10 (like -localip in a node-cache test setup without interface or
// table: -setupinterface=false -setupiptables=false, loopback already holds all of 127/8); the cluster DNS
// (kube-dns-upstream) is an Upstream on 127.0.0.53 answering 10.0.0.53 for everything; the node's upstream for "."
// is an Upstream on 127.0.0.54 answering 10.0.0.54; a stub domain's server is on 127.0.0.55 answering 10.0.0.55.
package serve

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const listen = "127.0.0.10:53"

// startAgent starts the agent with the kube-dns ConfigMap kubeDNS and extra environment env.
func startAgent(t *testing.T, kubeDNS map[string]string, env ...string) (*harness.Agent, *harness.ConfigMapVolume) {
	t.Helper()
	dir := t.TempDir()
	vol := harness.NewConfigMapVolume(t, filepath.Join(dir, "kube-dns"), kubeDNS)
	a := harness.Start(t, harness.Config{
		Dir:          dir,
		BaseCorefile: harness.StandardCorefile("127.0.0.10", "", "cluster.local"),
		Args: []string{"-localip", "127.0.0.10", "-setupinterface=false", "-setupiptables=false",
			"-upstreamsvc", "kube-dns-upstream", "-kubednscm", vol.Dir},
		Env: append([]string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=127.0.0.53"}, env...),
	})
	a.WaitReady()
	return a, vol
}

func lookup(t *testing.T, netw, name string) string {
	t.Helper()
	got, err := harness.Lookup(listen, netw, name, 2*time.Second)
	if err != nil {
		t.Fatalf("lookup %s over %s: %v", name, netw, err)
	}
	return got
}

func TestServesLikeNodeCache(t *testing.T) {
	testenv.RequireRoot(t)
	cluster := harness.StartUpstream(t, "127.0.0.53:53", "10.0.0.53")
	node := harness.StartUpstream(t, "127.0.0.54:53", "10.0.0.54")
	stub := harness.StartUpstream(t, "127.0.0.55:53", "10.0.0.55")
	a, vol := startAgent(t, map[string]string{
		"upstreamNameservers": `["127.0.0.54"]`,
		"stubDomains":         `{"corp.example": ["127.0.0.55"]}`,
	})

	t.Run("cluster domain goes to kube-dns-upstream over TCP", func(t *testing.T) {
		const name = "kubernetes.default.svc.cluster.local"
		if got := lookup(t, "udp", name); got != "10.0.0.53" {
			t.Errorf("answer %s, want the cluster DNS's 10.0.0.53", got)
		}
		// The client asked over UDP; the standard Corefile's force_tcp makes the cache ask over TCP.
		if all, tcp := cluster.QueriesFor(name), cluster.QueriesOverTCP(name); all != 1 || tcp != 1 {
			t.Errorf("cluster DNS saw %d queries for %s, %d of them over TCP; want 1, over TCP", all, name, tcp)
		}
	})
	t.Run("other names go to upstreamNameservers", func(t *testing.T) {
		if got := lookup(t, "udp", "www.example.org"); got != "10.0.0.54" {
			t.Errorf("answer %s, want the node upstream's 10.0.0.54", got)
		}
		if got := lookup(t, "tcp", "tcp.example.org"); got != "10.0.0.54" {
			t.Errorf("TCP answer %s, want 10.0.0.54", got)
		}
	})
	t.Run("second query is served from cache", func(t *testing.T) {
		lookup(t, "udp", "cached.example.org")
		lookup(t, "udp", "cached.example.org")
		lookup(t, "tcp", "cached.example.org")
		if n := node.QueriesFor("cached.example.org"); n != 1 {
			t.Errorf("upstream saw %d queries for 3 identical lookups, want 1", n)
		}
	})
	t.Run("stub domain goes to its own server", func(t *testing.T) {
		if got := lookup(t, "udp", "host.corp.example"); got != "10.0.0.55" {
			t.Errorf("answer %s, want the stub server's 10.0.0.55", got)
		}
		// Stub blocks forward over UDP, as node-cache's do (commit 0ceb7f4a).
		if all, tcp := stub.QueriesFor("host.corp.example"), stub.QueriesOverTCP("host.corp.example"); all != 1 || tcp != 0 {
			t.Errorf("stub server saw %d queries, %d over TCP; want 1 over UDP", all, tcp)
		}
	})
	t.Run("injection attempt is refused and answers keep coming", func(t *testing.T) {
		vol.Update(t, map[string]string{
			"upstreamNameservers": `["127.0.0.54"]`,
			"stubDomains":         `{"corp.example": ["127.0.0.55"], "evil.example": ["1.1.1.1 }\n. {\n whoami"]}`,
		})
		testenv.Eventually(t, 5*time.Second, "configmap error counted", func() bool {
			v, _ := a.Metric(`coredns_nodecache_setup_errors_total{errortype="configmap"}`)
			return v >= 1
		})
		if got := lookup(t, "udp", "host2.corp.example"); got != "10.0.0.55" {
			t.Errorf("after refused update: stub answer %s, want 10.0.0.55", got)
		}
		if got := lookup(t, "udp", "after.example.org"); got != "10.0.0.54" {
			t.Errorf("after refused update: answer %s, want 10.0.0.54", got)
		}
		cf, err := os.ReadFile(filepath.Join(a.Dir, "Corefile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"whoami", "evil.example"} {
			if contains(cf, bad) {
				t.Errorf("written Corefile contains %q:\n%s", bad, cf)
			}
		}
	})
	t.Run("SIGTERM stops cleanly", func(t *testing.T) {
		if code := a.Stop(10 * time.Second); code != 0 {
			t.Errorf("exit code %d after SIGTERM", code)
		}
		if _, err := os.Stat(filepath.Join(a.Dir, "node-cache.pid")); err == nil {
			t.Error("pidfile left behind")
		}
	})
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

// The binary's command line: what node-cache users type must keep working, and errors are one line with exit 2.
func TestCommandLine(t *testing.T) {
	bin := harness.Binary(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-version"}, 0, "nodelocaldns"},
		{[]string{"--plugins"}, 0, "forward"},
		{[]string{"-print-rules", "-localip", "169.254.20.10,fd00::10"}, 0, "table inet nodelocaldns"},
		{[]string{"-localip", "169.254.20.10", "-syncinterval", "soon"}, 2, `invalid value "soon" for flag -syncinterval`},
		{[]string{"-localip", "bogus"}, 2, `invalid value "bogus" for flag -localip`},
		{[]string{}, 2, "-localip is required"},
	} {
		out, code := harness.RunBinary(t, bin, tc.args...)
		if code != tc.code || !contains([]byte(out), tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
		if tc.code == 2 && len(out) > 0 && strings.Contains(strings.TrimSuffix(out, "\n"), "\n") {
			t.Errorf("%v: error is more than one line: %q", tc.args, out)
		}
	}
}

// A metrics port that is taken at start-up (node-cache still holding 9353 during a migration) does not stop the
// agent from serving DNS, and its /metrics appears once the port is free.
func TestMetricsPortTakenAtStartup(t *testing.T) {
	testenv.RequireRoot(t)
	harness.StartUpstream(t, "127.0.0.53:53", "10.0.0.53")
	taken, err := net.Listen("tcp", "127.0.0.1:0") // no SO_REUSEPORT: the agent cannot share it
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	a := harness.Start(t, harness.Config{
		BaseCorefile: harness.StandardCorefile("127.0.0.10", "", "cluster.local"),
		Args: []string{"-localip", "127.0.0.10", "-setupinterface=false", "-setupiptables=false",
			"-upstreamsvc", "kube-dns-upstream", "-metrics-listen-address", addr},
		Env: []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=127.0.0.53"},
	})
	a.WaitReady()
	a.WaitLog(10*time.Second, "the metrics bind failure", func(l harness.LogLine) bool { return l.Msg == "metrics server; retrying" })
	if got := lookup(t, "udp", "svc.cluster.local"); got != "10.0.0.53" {
		t.Errorf("answer %s while the metrics port is taken", got)
	}
	taken.Close()
	testenv.Eventually(t, 15*time.Second, "metrics served once the port is free", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if v, ok := a.Metric(`coredns_nodecache_setup_errors_total{errortype="nftables"}`); !ok || v != 0 {
		t.Errorf("setup error series = %v, %v; want present and 0", v, ok)
	}
}
