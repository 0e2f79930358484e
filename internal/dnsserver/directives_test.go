package dnsserver

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
)

// A Corefile naming a plugin that is not compiled in must fail the same way whenever it is rendered: at
// start-up, before any Server exists, and at a reload, once one serves. Both renders validate against
// Directives, which is also the list CoreDNS parses with, so the message is CoreDNS's own.
func TestRenderAgreesWithCoreDNSAtStartAndReload(t *testing.T) {
	base := []byte(".:0 {\n  bind __PILLAR__LOCAL__DNS__\n  errors\n  kubernetes cluster.local\n}\n")
	params := corefile.Params{LocalIPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Directives: Directives()}
	_, atStart := corefile.Render(base, corefile.KubeDNS{}, params)
	const want = "Unknown directive 'kubernetes'"
	if atStart == nil || !strings.Contains(atStart.Error(), want) {
		t.Fatalf("Render at start = %v; want an error containing %q", atStart, want)
	}

	s, err := New(zaptest.NewLogger(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	good := ".:0 {\n  bind 127.0.0.1\n  errors\n}\n"
	if err := s.Start([]byte(good), "Corefile"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	serving(t, s)
	params.Directives = Directives()
	_, atReload := corefile.Render(base, corefile.KubeDNS{}, params)
	if fmt.Sprint(atReload) != atStart.Error() {
		t.Errorf("Render at reload = %v\nat start          = %v; want the same", atReload, atStart)
	}
	// CoreDNS itself refuses the Corefile with the same words.
	bad := strings.Replace(good, "  errors\n", "  errors\n  kubernetes cluster.local\n", 1)
	if _, err := s.Reload([]byte(bad)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Reload = %v; want CoreDNS's %q", err, want)
	}
}

// serving waits until every listener of s answers. A caddy instance stopped before its servers have entered
// their serve loops keeps serving (miekg/dns refuses to shut down a server that has not started), and Stop
// then waits for it forever. With port 0 the UDP and TCP listeners have ports of their own.
func serving(t *testing.T, s *Server) {
	t.Helper()
	for _, addr := range s.Addrs() {
		m := new(dns.Msg)
		m.SetQuestion("serving.example.", dns.TypeA)
		_, _, errTCP := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(m, addr)
		_, _, errUDP := (&dns.Client{Net: "udp", Timeout: 100 * time.Millisecond}).Exchange(m, addr)
		if errTCP != nil && errUDP != nil {
			t.Fatalf("no answer from %s: tcp %v, udp %v", addr, errTCP, errUDP)
		}
	}
}
