package dnsserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Conventions: everything listens on 127.0.0.1 with kernel-chosen ports; the "upstream" is testenv's in-process
// server (testenv.StartUpstream) that answers A queries with 192.0.2.1 and counts what reaches it.

// startUpstream is the tests' upstream: testenv's, answering 192.0.2.1.
func startUpstream(t *testing.T) *testenv.Upstream {
	t.Helper()
	return testenv.StartUpstream(t, "127.0.0.1:0", "192.0.2.1")
}

func query(t *testing.T, server, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, server)
	if err != nil {
		t.Fatalf("query %s at %s: %v", name, server, err)
	}
	return r
}

func udpAddr(t *testing.T, s *Server) string {
	t.Helper()
	for _, a := range s.Addrs() {
		if _, err := net.ResolveUDPAddr("udp", a); err == nil {
			return a
		}
	}
	t.Fatalf("no listener in %v", s.Addrs())
	return ""
}

// The whole life of the embedded server in one test: each step depends on the one before.
func TestServeReloadStop(t *testing.T) {
	up := startUpstream(t)
	s, err := New(zaptest.NewLogger(t), Options{FastPath: fastpath.NewMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(".:0 {\n  bind 127.0.0.1\n  errors\n  reload\n  health 127.0.0.1:0\n  cache 30\n  forward . %s\n}\n", up.Addr)
	if err := s.Start([]byte(corefile), "Corefile"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	addr := udpAddr(t, s)

	t.Run("forwards and caches", func(t *testing.T) {
		r := query(t, addr, "cached.example")
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Fatalf("answer = %v, want the upstream's 192.0.2.1", r.Answer)
		}
		query(t, addr, "cached.example")
		if n := up.QueriesFor("cached.example"); n != 1 {
			t.Errorf("upstream saw %d queries for two identical lookups, want 1 (second from cache)", n)
		}
	})

	healthURL := "http://" + s.healthAddrs()[0]
	t.Run("health and ready", func(t *testing.T) {
		if code, body := get(t, healthURL+"/health"); code != 200 || body != "OK" {
			t.Errorf("/health = %d %q", code, body)
		}
		s.SetReadiness(func() error { return fmt.Errorf("nftables table missing") })
		if code, body := get(t, healthURL+"/ready"); code != 503 || !strings.Contains(body, "table missing") {
			t.Errorf("/ready while not ready = %d %q", code, body)
		}
		s.SetReadiness(nil)
		if code, _ := get(t, healthURL+"/ready"); code != 200 {
			t.Errorf("/ready = %d, want 200", code)
		}
	})

	t.Run("reload keeps the listener and health", func(t *testing.T) {
		// Same upstream, plus a template that answers one name locally: visible only if the reload took effect.
		next := strings.Replace(corefile, "  cache 30\n", "  cache 30\n  template IN A reloaded.example {\n    answer \"{{ .Name }} 60 IN A 198.51.100.7\"\n  }\n", 1)
		start := time.Now()
		changed, err := s.Reload([]byte(next))
		if err != nil || !changed {
			t.Fatalf("Reload = %v, %v", changed, err)
		}
		t.Logf("reload took %v", time.Since(start))
		if r := query(t, addr, "reloaded.example"); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "198.51.100.7" {
			t.Errorf("after reload: %v", r.Answer)
		}
		if s.healthAddrs()[0] != strings.TrimPrefix(healthURL, "http://") {
			t.Errorf("health listener moved from %s to %v", healthURL, s.healthAddrs())
		}
		if changed, err := s.Reload([]byte(next)); changed || err != nil {
			t.Errorf("identical reload = %v, %v; want a no-op", changed, err)
		}
	})

	t.Run("bad reload keeps serving", func(t *testing.T) {
		for _, bad := range []string{
			".:0 {\n  bind 127.0.0.1\n  kubernetes cluster.local\n}\n", // a plugin we do not ship
			".:0 {\n  bind 127.0.0.1\n  forward\n}\n",                  // a plugin that refuses its arguments
			".:0 {\n  bind 127.0.0.1\n",                                // does not parse
			".:0 {\n  bind 127.0.0.1\n  reload 1s\n}\n",                // reload's own limits still apply
		} {
			if _, err := s.Reload([]byte(bad)); err == nil {
				t.Errorf("Reload(%q) succeeded", bad)
			}
			if r := query(t, addr, "reloaded.example"); len(r.Answer) != 1 {
				t.Errorf("after failed reload %q: %v", bad, r.Answer)
			}
		}
	})

	t.Run("a forward to its own address is refused before it serves", func(t *testing.T) {
		loops := make(chan *LoopError, 4)
		s.OnLoop(func(e *LoopError) { loops <- e })
		port := freeUDPPort(t)
		looping := string(s.Corefile()) + fmt.Sprintf("example.net:%s {\n  bind 127.0.0.1\n  loop\n  forward . 127.0.0.1:%s\n}\n", port, port)
		gen := s.Generation()
		_, err := s.Reload([]byte(looping))
		var e *LoopError
		if !errors.As(err, &e) || e.Upstream != "127.0.0.1:"+port || e.Generation != gen+1 {
			t.Fatalf("Reload = %v, want a *LoopError naming 127.0.0.1:%s in generation %d", err, port, gen+1)
		}
		if s.Generation() != gen {
			t.Errorf("generation %d after the refusal, want %d: the configuration must not have started", s.Generation(), gen)
		}
		if r := query(t, addr, "reloaded.example"); len(r.Answer) != 1 {
			t.Errorf("the running configuration must keep serving: %v", r.Answer)
		}
		select {
		case e := <-loops:
			t.Errorf("the probe reported %v for a configuration that never started", e)
		case <-time.After(100 * time.Millisecond):
		}
	})

	t.Run("a forwarding loop is reported, not fatal", func(t *testing.T) {
		loops := make(chan *LoopError, 4)
		s.OnLoop(func(e *LoopError) { loops <- e })
		p1, p2 := freeUDPPort(t), freeUDPPort(t)
		for p2 == p1 {
			p2 = freeUDPPort(t)
		}
		// Two server blocks forwarding to each other: no block names its own address, so only the probe can
		// find it; upstream's loop plugin would exit here.
		looping := string(s.Corefile()) +
			fmt.Sprintf("example.net:%s {\n  bind 127.0.0.1\n  loop\n  forward . 127.0.0.1:%s\n}\n", p1, p2) +
			fmt.Sprintf("example.net:%s {\n  bind 127.0.0.1\n  forward . 127.0.0.1:%s\n}\n", p2, p1)
		gen := s.Generation()
		if _, err := s.Reload([]byte(looping)); err != nil {
			t.Fatalf("Reload: %v", err)
		}
		select {
		case e := <-loops:
			if e.Generation != gen+1 || e.Zone != "example.net." {
				t.Errorf("loop reported as %+v, want generation %d, zone example.net.", e, gen+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no loop reported within 10 s")
		}
		if r := query(t, addr, "reloaded.example"); len(r.Answer) != 1 {
			t.Errorf("the process must keep serving after a loop: %v", r.Answer)
		}
	})

	t.Run("stop", func(t *testing.T) {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		c := &dns.Client{Timeout: 300 * time.Millisecond}
		m := new(dns.Msg)
		m.SetQuestion("cached.example.", dns.TypeA)
		if _, _, err := c.Exchange(m, addr); err == nil {
			t.Error("still answering after Stop")
		}
		if _, err := http.Get(healthURL + "/health"); err == nil {
			t.Error("health still answering after Stop")
		}
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestPlugins(t *testing.T) {
	got := strings.Join(Plugins(), " ")
	want := "bind bufsize cache debug dns64 dnstap errors fairshare forward health hosts loadbalance log loop metadata pprof prometheus ready reload rewrite template timeouts trace whoami"
	if got != want {
		t.Errorf("Plugins() = %s\nwant         %s", got, want)
	}
	// Every compiled-in plugin must be one CoreDNS knows how to order, or no Corefile could use it.
	if d := Directives(); len(d) != len(Plugins()) {
		t.Errorf("Directives() = %v: some plugin is not in CoreDNS's directive list", d)
	}
}

// fairshare runs after cache and just before forward, so that only misses take a slot of the bound.
func TestFairshareOrder(t *testing.T) {
	d := Directives()
	i, c, f := slices.Index(d, "fairshare"), slices.Index(d, "cache"), slices.Index(d, "forward")
	if i < 0 || c > i || f != i+1 {
		t.Errorf("Directives() = %v: want fairshare after cache and right before forward", d)
	}
}

// TestMetricsInTheServersRegistry: our directives count into the registry the Server was given, and its
// `prometheus` listener serves it; nothing of theirs reaches the default registry.
func TestMetricsInTheServersRegistry(t *testing.T) {
	up := startUpstream(t)
	reg := prometheus.NewRegistry()
	s, err := New(zaptest.NewLogger(t), Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(".:0 {\n  bind 127.0.0.1\n  prometheus 127.0.0.1:0\n  cache 30\n  fairshare 10\n  forward . %s\n}\n", up.Addr)
	if err := s.Start([]byte(corefile), "Corefile"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	query(t, udpAddr(t, s), "counted.example")
	names := func(g prometheus.Gatherer) map[string]bool {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, mf := range mfs {
			out[mf.GetName()] = true
		}
		return out
	}
	ours, def := names(reg), names(prometheus.DefaultGatherer)
	for _, n := range []string{"coredns_cache_requests_total", "coredns_cache_entries", "coredns_fairshare_refused_total", "coredns_build_info"} {
		if !ours[n] {
			t.Errorf("%s not in the Server's registry", n)
		}
	}
	for _, n := range []string{"coredns_cache_requests_total", "coredns_fairshare_refused_total"} {
		if def[n] {
			t.Errorf("%s in the default registry", n)
		}
	}
	if len(s.metrics) != 1 {
		t.Fatalf("%d metrics listeners, want 1", len(s.metrics))
	}
	for _, ml := range s.metrics {
		if _, body := get(t, "http://"+ml.ln.Addr().String()+"/metrics"); !strings.Contains(body, "coredns_cache_requests_total{") {
			t.Errorf("the prometheus listener does not serve the Server's registry:\n%s", body)
		}
	}
}

// freeUDPPort is a port on 127.0.0.1 that was free for UDP a moment ago: a Corefile's server block takes it for
// UDP and TCP alike (with ":0" each would get its own).
func freeUDPPort(t *testing.T) string { return testenv.FreePort(t, "udp") }
