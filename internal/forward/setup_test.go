package forward_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

// TestSetupLikeCoreDNS parses each stanza with CoreDNS's forward setup and ours: both refuse it with the same
// text, or both accept it with the same upstreams and protocol options. The inputs cover CoreDNS's setup tests
// (setup_test.go, setup_policy_test.go) and every option a node-cache Corefile or the community chart writes.
func TestSetupLikeCoreDNS(t *testing.T) {
	ref := coreDNSSetup(t)
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.10.255.252\nnameserver 10.10.255.253\nsearch x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.conf")
	if err := os.WriteFile(empty, []byte("search x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inputs := []string{
		// Accepted.
		"forward . 127.0.0.1",
		"forward . 127.0.0.1:53",
		"forward . 127.0.0.1:8080",
		"forward . [::1]:53",
		"forward . [2003::1]:53",
		"forward . 127.0.0.1 \n",
		"forward 10.9.3.0/18 127.0.0.1",
		"forward . ::1\nforward com ::2",
		"forward . 127.0.0.1 127.0.0.2 127.0.0.1",
		"forward . " + resolv,
		"forward . " + resolv + " 127.0.0.1",
		"forward . " + empty + " 127.0.0.1",
		"forward cluster.local 10.96.0.10 {\nforce_tcp\n}",
		"forward . 10.96.0.10 {\nforce_tcp\nmax_concurrent 250\nfailfast_all_unhealthy_upstreams\n}",
		"forward . 127.0.0.1 {\nhealth_check 0.5s domain example.org\n}",
		"forward . 127.0.0.1 {\nhealth_check 1s no_rec\n}",
		"forward . 127.0.0.1 {\nhealth_check 0\n}",
		"forward . 127.0.0.1 {\nexcept miek.nl example.org\n}",
		"forward . 127.0.0.1 {\nmax_fails 3\n}",
		"forward . 127.0.0.1 {\nmax_fails 0\n}",
		"forward . 127.0.0.1 {\nforce_tcp\n}",
		"forward . 127.0.0.1 {\nprefer_udp\n}",
		"forward . 127.0.0.1 {\nforce_tcp\nprefer_udp\n}",
		"forward . 127.0.0.1 {\nexpire 5s\n}",
		"forward . 127.0.0.1 {\nexpire 0s\n}",
		"forward . 127.0.0.1 {\nmax_age 30s\n}",
		"forward . 127.0.0.1 {\nmax_idle_conns 10\n}",
		"forward . 127.0.0.1 {\nread_timeout 1s\n}",
		"forward . 127.0.0.1 {\npolicy random\n}",
		"forward . 127.0.0.1 {\npolicy round_robin\n}",
		"forward . 127.0.0.1 {\npolicy sequential\n}",
		"forward . 127.0.0.1 {\nmax_concurrent 0\n}",
		"forward . 127.0.0.1 {\nmax_concurrent 1000\n}",
		"forward . 127.0.0.1 {\nmax_connect_attempts 3\n}",
		"forward . 127.0.0.1 {\nnext NXDOMAIN SERVFAIL\n}",
		"forward . 127.0.0.1 {\nnext_on_nodata\n}",
		"forward . 127.0.0.1 {\nfailover SERVFAIL REFUSED\n}",
		"forward . 127.0.0.1 {\nfailfast_all_unhealthy_upstreams\n}",
		"forward . 127.0.0.1 {\nsource_address 127.0.0.1\n}",
		"forward . tls://127.0.0.1 {\ntls\ntls_servername dns.example\n}",
		"forward . tls://[2400:3200::1%dns.alidns.com]:853 {\ntls\n}",
		"forward . tls://127.0.0.1%a.example tls://127.0.0.2%b.example",
		"forward . https://127.0.0.1",
		"forward . https://127.0.0.1 {\ndoh_method GET\n}",
		"forward . quic://127.0.0.1",
		"forward . 127.0.0.1 {\nresolver 10.0.0.1 10.0.0.2:53\n}",
		// Refused.
		"forward",
		"forward .",
		"forward . https://1.1.1.1/",
		"forward . 127.0.0.1 {\nblaatl\n}",
		"forward . 127.0.0.1 {\nhealth_check 0.5s domain\n}",
		"forward . 127.0.0.1 {\nhealth_check\n}",
		"forward . 127.0.0.1 {\nhealth_check -1s\n}",
		"forward . 127.0.0.1 {\nhealth_check x\n}",
		"forward . 127.0.0.1 {\nhealth_check 1s bogus\n}",
		"forward . 127.0.0.1 {\nhealth_check 1s domain bad..name\n}",
		"forward xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx 127.0.0.1 \n",
		"forward . 127.0.0.1 {\nexcept\n}",
		"forward . 127.0.0.1 {\nmax_fails\n}",
		"forward . 127.0.0.1 {\nmax_fails -1\n}",
		"forward . 127.0.0.1 {\nforce_tcp x\n}",
		"forward . 127.0.0.1 {\nprefer_udp x\n}",
		"forward . 127.0.0.1 {\nexpire -5s\n}",
		"forward . 127.0.0.1 {\nexpire\n}",
		"forward . 127.0.0.1 {\nmax_age -1s\n}",
		"forward . 127.0.0.1 {\nmax_age 1s\n}",
		"forward . 127.0.0.1 {\nread_timeout 0s\n}",
		"forward . 127.0.0.1 {\nmax_idle_conns -1\n}",
		"forward . 127.0.0.1 {\nmax_idle_conns x\n}",
		"forward . 127.0.0.1 {\npolicy\n}",
		"forward . 127.0.0.1 {\npolicy bogus\n}",
		"forward . 127.0.0.1 {\nmax_concurrent -1\n}",
		"forward . 127.0.0.1 {\nmax_concurrent x\n}",
		"forward . 127.0.0.1 {\nmax_connect_attempts -1\n}",
		"forward . 127.0.0.1 {\nnext\n}",
		"forward . 127.0.0.1 {\nnext NOTANRCODE\n}",
		"forward . 127.0.0.1 {\nnext_on_nodata x\n}",
		"forward . 127.0.0.1 {\nfailover NOERROR\n}",
		"forward . 127.0.0.1 {\nfailover\n}",
		"forward . 127.0.0.1 {\nfailover bogus\n}",
		"forward . 127.0.0.1 {\nfailfast_all_unhealthy_upstreams x\n}",
		"forward . 127.0.0.1 {\ntls a b c d\n}",
		"forward . 127.0.0.1 {\ntls /nonexistent/cert /nonexistent/key\n}",
		"forward . 127.0.0.1 {\ntls_servername\n}",
		"forward . 127.0.0.1 {\ndoh_method PUT\n}",
		"forward . 127.0.0.1 {\nresolver\n}",
		"forward . 127.0.0.1 {\nresolver notanip\n}",
		"forward . 127.0.0.1 {\nsource_address\n}",
		"forward . 127.0.0.1 {\nsource_address notanip\n}",
		"forward . tls://127.0.0.1%a.example {\ntls_servername b.example\n}",
		"forward . unix:///tmp/sock",
		"forward . grpc://127.0.0.1",
		"forward . 127.0.0.1 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5 127.0.0.6 127.0.0.7 127.0.0.8 127.0.0.9 127.0.0.10 127.0.0.11 127.0.0.12 127.0.0.13 127.0.0.14 127.0.0.15 127.0.0.16",
		"forward . 127.0.0.1 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5 127.0.0.6 127.0.0.7 127.0.0.8 127.0.0.9 127.0.0.10 127.0.0.11 127.0.0.12 127.0.0.13 127.0.0.14 127.0.0.15",
		"forward . 127.0.0.1 {\nmax_age 5s\nexpire 10s\n}",
		"forward . " + empty,
	}
	for _, in := range inputs {
		t.Run(in, func(t *testing.T) {
			want := describe(ref, in)
			got := describe(ourSetup, in)
			if want != got {
				t.Errorf("%q\ncoredns: %s\nours:    %s", in, want, got)
			}
		})
	}
}

// describe sets a stanza up and says what came of it: the error, or each forward's upstream count and
// protocol options.
func describe(setup caddy.SetupFunc, in string) string {
	c := caddy.NewTestController("dns", in)
	c.ServerBlockKeys = []string{"."}
	if err := setup(c); err != nil {
		return "error: " + err.Error()
	}
	s := "ok"
	for _, p := range dnsserver.GetConfig(c).Plugin {
		f, ok := p(nextPlugin{}).(interface {
			Len() int
			ForceTCP() bool
			PreferUDP() bool
		})
		if !ok {
			return "not a forward"
		}
		s += fmt.Sprintf(" [upstreams=%d force_tcp=%v prefer_udp=%v]", f.Len(), f.ForceTCP(), f.PreferUDP())
	}
	return s
}

// TestHostnameUpstreamsRefused: CoreDNS 1.13 resolves hostname upstreams; ours refuses them by name.
func TestHostnameUpstreamsRefused(t *testing.T) {
	for _, to := range []string{"dns.example.org", "dns.example.org:5353", "tls://dns.example.org"} {
		got := describe(ourSetup, "forward . "+to)
		if want := fmt.Sprintf("error: plugin/forward: %q: hostname upstreams are not supported by nodelocaldns's forward", to); got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}
