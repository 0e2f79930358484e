package dnsserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// askFrom asks name over net ("udp" or "tcp") from the local address from (any 127/8 address is this host's).
func askFrom(t *testing.T, server, network, from, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	var local net.Addr = &net.UDPAddr{IP: net.ParseIP(from)}
	if network == "tcp" {
		local = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c := &dns.Client{Net: network, Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: local, Timeout: 2 * time.Second}}
	r, _, err := c.Exchange(m, server)
	if err != nil {
		t.Fatalf("query %s over %s from %s: %v", name, network, from, err)
	}
	return r
}

// Every answer is counted once, for the address that asked: the fast path's hits, CoreDNS's misses over UDP
// and its answers over TCP; the health socket serves the table at /clients.
func TestClientsCountsEveryAnswerOnce(t *testing.T) {
	up := startUpstream(t)
	fast := fastpath.NewMetrics()
	acct := clients.New(zap.NewNop())
	sock := filepath.Join(t.TempDir(), "health.sock")
	s, err := New(zaptest.NewLogger(t), Options{FastPath: fast, Clients: acct, HealthSocket: sock})
	if err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(".:0 {\n  bind 127.0.0.1\n  errors\n  cache 30\n  template IN A nx.example {\n    rcode NXDOMAIN\n  }\n  forward . %s\n}\n", up.Addr)
	if err := s.Start([]byte(corefile), "Corefile"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	addr := udpAddr(t, s)
	s.mu.Lock()
	tcp := tcpAddrs(s.inst)[0].String() // ":0": the kernel chose TCP's port apart from UDP's
	s.mu.Unlock()

	const udpA, tcpA, nxB = 20, 3, 10
	for range udpA {
		if r := askFrom(t, addr, "udp", "127.0.0.2", "hit.example"); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("hit.example: %s", dns.RcodeToString[r.Rcode])
		}
	}
	for range tcpA {
		askFrom(t, tcp, "tcp", "127.0.0.2", "hit.example")
	}
	for range nxB {
		if r := askFrom(t, addr, "udp", "127.0.0.3", "nx.example"); r.Rcode != dns.RcodeNameError {
			t.Fatalf("nx.example: %s", dns.RcodeToString[r.Rcode])
		}
	}

	if n := fastReceived(t, fast); n < udpA+nxB {
		t.Fatalf("the fast path received %v datagrams: want the %d UDP queries, its hits among them", n, udpA+nxB)
	}
	// An answer is counted once written, so the client may read it first: wait (bounded) for the last counts.
	var a, b clients.Client
	testenv.Eventually(t, 5*time.Second, "every answer counted", func() bool {
		find := func(s clients.Snapshot, addr string) clients.Client {
			i := slices.IndexFunc(s.Clients, func(c clients.Client) bool { return c.Addr == addr })
			if i < 0 {
				return clients.Client{Addr: addr}
			}
			return s.Clients[i]
		}
		snap := getClients(t, sock)
		a, b = find(snap, "127.0.0.2"), find(snap, "127.0.0.3")
		return a.Answers >= udpA+tcpA && b.Answers >= nxB
	})
	if a.Answers != udpA+tcpA || a.NoError != udpA+tcpA || a.Misses < 1 || a.Hits < udpA-3 || a.Hits+a.Misses != a.Answers {
		t.Errorf("127.0.0.2: %+v: want %d answers, all NOERROR, the first a miss and most hits (the fast path's)", a, udpA+tcpA)
	}
	if len(a.TopNames) != 1 || a.TopNames[0].Name != "hit.example." || a.TopNames[0].Count != udpA+tcpA {
		t.Errorf("127.0.0.2's names: %+v", a.TopNames)
	}
	if b.Answers != nxB || b.NXDomain != nxB {
		t.Errorf("127.0.0.3: %+v: want %d NXDOMAIN answers", b, nxB)
	}
	// Counted by name: the forward's own traffic (a health check) is not the cache's business.
	if n := up.QueriesFor("hit.example"); n != 1 {
		t.Errorf("upstream asked %d times for hit.example: want once (the rest from the cache)", n)
	}
}

func getClients(t *testing.T, sock string) clients.Snapshot {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 2 * time.Second}
	resp, err := c.Get("http://health/clients?n=10")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var snap clients.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		t.Fatalf("/clients: %v", err)
	}
	return snap
}

// The TCP health address, which every pod can reach, does not serve who asks what.
func TestClientsOnlyOnTheSocket(t *testing.T) {
	s, err := New(zaptest.NewLogger(t), Options{Clients: clients.New(zap.NewNop())})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start([]byte(".:0 {\n  bind 127.0.0.1\n  health 127.0.0.1:0\n  cache 30\n  whoami\n}\n"), "Corefile"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	addrs := s.healthAddrs()
	if len(addrs) != 1 {
		t.Fatalf("health addresses %v", addrs)
	}
	if code, _ := get(t, "http://"+addrs[0]+"/clients"); code != http.StatusNotFound {
		t.Errorf("/clients on the TCP health address: %d, want 404", code)
	}
}

// fastReceived is the fast path's nodelocaldns_fastpath_received_datagrams_total.
func fastReceived(t *testing.T, m *fastpath.Metrics) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "nodelocaldns_fastpath_received_datagrams_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no nodelocaldns_fastpath_received_datagrams_total")
	return 0
}
