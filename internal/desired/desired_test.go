package desired

import (
	"io"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

func parse(t *testing.T, args string) *options.Options {
	t.Helper()
	o, err := options.Parse(strings.Fields(args), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestOf: each flag and fact that changes the state lands where it belongs, and nowhere else.
func TestOf(t *testing.T) {
	v4 := "-localip 169.254.20.10,10.96.0.10"
	for _, tc := range []struct {
		name, args string
		f          Facts
		check      func(t *testing.T, s State)
	}{
		{"defaults", v4, Facts{}, func(t *testing.T, s State) {
			want := nft.Spec{LocalIPs: addrs("169.254.20.10", "10.96.0.10"), DNSPort: 53, HealthPort: 8080,
				Fallbacks: []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53")}}
			if !reflect.DeepEqual(s.NFT, want) || !s.Table || !s.Interface {
				t.Errorf("state %+v; want table %+v, an interface", s, want)
			}
			if !reflect.DeepEqual(s.Link, link.Spec{Name: "nodelocaldns", IPs: want.LocalIPs}) {
				t.Errorf("link %+v", s.Link)
			}
			if s.Fallback.Lease != options.DefaultFallbackLease || !strings.Contains(s.Fallback.Why, "-localip") {
				t.Errorf("fallback %+v", s.Fallback)
			}
		}},
		{"no interception", v4 + " -setupnftables=false", Facts{NoSocket: true}, func(t *testing.T, s State) {
			if !s.Table || !s.NFT.NoInterception || s.NFT.Ungated {
				t.Errorf("state %+v; want a table without interception, and so not ungated", s)
			}
		}},
		{"the alias", v4 + " -setupiptables=false", Facts{}, func(t *testing.T, s State) {
			if !s.NFT.NoInterception {
				t.Error("-setupiptables=false intercepts")
			}
		}},
		{"no table at all", v4 + " -setupnftables=false -setupinterface=false", Facts{}, func(t *testing.T, s State) {
			if s.Table || s.Interface {
				t.Errorf("state %+v; want no table, no interface", s)
			}
		}},
		{"interface only off", v4 + " -setupinterface=false", Facts{}, func(t *testing.T, s State) {
			if !s.Table || s.Interface || s.NFT.NoInterception {
				t.Errorf("state %+v; want an intercepting table and no interface", s)
			}
		}},
		{"no nft_socket", v4, Facts{NoSocket: true}, func(t *testing.T, s State) {
			if !s.NFT.Ungated {
				t.Error("a kernel without nft_socket gets gated rules")
			}
		}},
		{"ports", v4 + " -dns.port 1053 -health-port 9090", Facts{}, func(t *testing.T, s State) {
			if s.NFT.DNSPort != 1053 || s.NFT.HealthPort != 9090 || s.Corefile.Params.DNSPort != 1053 ||
				!slices.Equal(s.NFT.Fallbacks, []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:1053")}) {
				t.Errorf("state %+v", s)
			}
		}},
		{"no fallback", v4 + " -linklocal-fallback=false", Facts{KubeDNSHost: "10.96.0.10"}, func(t *testing.T, s State) {
			if len(s.NFT.Fallbacks) != 0 || s.Fallback.Why != "-linklocal-fallback=false" {
				t.Errorf("fallback %v, %+v", s.NFT.Fallbacks, s.Fallback)
			}
		}},
		{"the environment's word ignored", v4, Facts{KubeDNSHost: "10.96.0.66"}, func(t *testing.T, s State) {
			if len(s.Fallback.Ignored) != 1 || s.Fallback.Ignored[0].Env != netip.MustParseAddr("10.96.0.66") {
				t.Errorf("ignored %+v", s.Fallback.Ignored)
			}
		}},
		{"corefile", v4 + " -upstreamsvc kube-dns-upstream -conf /etc/Corefile.out -basecorefile /b/Corefile.base -prometheus-listen-address :9999",
			Facts{UpstreamHost: "10.96.0.11", KubeDNSDir: true, Directives: []string{"cache", "forward"}}, func(t *testing.T, s State) {
				want := Corefile{Base: "/b/Corefile.base", Out: "/etc/Corefile.out", KubeDNSDir: KubeDNSDir}
				want.Params.LocalIPs, want.Params.DNSPort = addrs("169.254.20.10", "10.96.0.10"), 53
				want.Params.ClusterDNS, want.Params.ClusterDNSEnv = "10.96.0.11", "KUBE_DNS_UPSTREAM_SERVICE_HOST"
				want.Params.PrometheusEndpoint, want.Params.Directives = ":9999", []string{"cache", "forward"}
				if !reflect.DeepEqual(s.Corefile, want) {
					t.Errorf("corefile %+v\nwant %+v", s.Corefile, want)
				}
			}},
		{"-kubednscm wins over the default directory", v4 + " -kubednscm /cm", Facts{KubeDNSDir: true}, func(t *testing.T, s State) {
			if s.Corefile.KubeDNSDir != "/cm" {
				t.Errorf("kube-dns directory %q", s.Corefile.KubeDNSDir)
			}
		}},
		{"no kube-dns directory", v4, Facts{}, func(t *testing.T, s State) {
			if s.Corefile.KubeDNSDir != "" {
				t.Errorf("kube-dns directory %q", s.Corefile.KubeDNSDir)
			}
		}},
		{"dual-stack", "-localip 169.254.20.10,fd00::10,10.96.0.10 -interfacename nld0", Facts{}, func(t *testing.T, s State) {
			if s.Link.Name != "nld0" || len(s.NFT.LocalIPs) != 3 || s.NFT.Fallbacks[0].Addr() != netip.MustParseAddr("10.96.0.10") {
				t.Errorf("state %+v", s)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := parse(t, tc.args)
			s := Of(o, tc.f)
			if err := s.Validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if again := Of(o, tc.f); !reflect.DeepEqual(s, again) {
				t.Fatalf("Of is not deterministic:\n%+v\n%+v", s, again)
			}
			tc.check(t, s)
		})
	}
}

// -teardown has no -localip: its state names the interface, and does not validate.
func TestOfTeardown(t *testing.T) {
	s := Of(parse(t, "-teardown -interfacename nld0"), Facts{})
	if s.Link.Name != "nld0" || len(s.NFT.LocalIPs) != 0 {
		t.Errorf("teardown state %+v", s)
	}
	if s.Validate() == nil {
		t.Error("a state without local IPs validates")
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{"KUBE_DNS_SERVICE_HOST": "10.96.0.10", "KUBE_DNS_UPSTREAM_SERVICE_HOST": "10.96.0.11"}
	f := FromEnv(parse(t, "-localip 169.254.20.10 -upstreamsvc kube-dns-upstream"), func(k string) string { return env[k] })
	if !reflect.DeepEqual(f, Facts{KubeDNSHost: "10.96.0.10", UpstreamHost: "10.96.0.11"}) {
		t.Errorf("facts %+v", f)
	}
}
