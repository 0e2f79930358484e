package corefile

import (
	"net/netip"
	"strings"
	"testing"

	coredns "github.com/coredns/coredns/core/dnsserver"
)

// testDirectives is CoreDNS's whole directive list, as the package's tests validate with. The agent passes the
// list restricted to its compiled-in plugins (internal/dnsserver.Directives, whose tests check that a render
// and CoreDNS agree on it).
var testDirectives = coredns.Directives

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, corefile, wantErr string // wantErr "" means valid
	}{
		{"minimal", ".:53 {\n    whoami\n}\n", ""},
		{"brace-less single block", ".:53\nwhoami\n", ""},
		{"comments and quotes", "# hi\n.:53 {\n    errors # trailing\n    rewrite name \"a.b\" c.d\n}\n", ""},
		{"empty", "", "no server blocks"},
		{"only a comment", "# nothing\n", "no server blocks"},
		{"unknown directive", ".:53 {\n    errors\n    whoamii\n}\n", "Corefile:3 - Error during parsing: Unknown directive 'whoamii'"},
		{"unclosed block", ".:53 {\n    forward . 192.0.2.1 {\n        force_tcp\n    }\n", "Corefile:1: '{' is never closed"},
		{"stray close", ".:53 {\n    whoami\n}\n}\n", "Corefile:4"},
		{"bad key", "a..b:53 {\n    whoami\n}\n", `Corefile:1: server block key "a..b:53"`},
		{"same zone twice", ".:53 {\n    whoami\n}\nexample.org {\n    whoami\n}\n.:53 {\n    whoami\n}\n",
			"Corefile:7: cannot serve dns://.:53 - it is already defined (line 1)"},
		{"zone case and dot", "Example.ORG.:53 {\n    whoami\n}\nexample.org:53 {\n    whoami\n}\n", "Corefile:4: cannot serve dns://example.org.:53"},
		{"same zone, same bound address", "a:53 {\n    bind 192.0.2.1\n}\na:53 {\n    bind 192.0.2.2 192.0.2.1\n}\n",
			"Corefile:4: cannot serve dns://a.:53 on 192.0.2.1 - it is already defined (line 1)"},
		{"same zone, other bound address", "a:53 {\n    bind 192.0.2.1\n}\na:53 {\n    bind 192.0.2.2\n}\n", ""},
		{"same zone, bound and unbound", "a:53 {\n    bind 192.0.2.1\n}\na:53 {\n    whoami\n}\n", "zone overlap listener capacity"},
		{"same zone, other port", "a:53 {\n    whoami\n}\na:5353 {\n    whoami\n}\n", ""},
		{"same zone, other transport", "a:53 {\n    whoami\n}\ntls://a:53 {\n    whoami\n}\n", ""},
		{"reverse CIDR expands", "10.0.0.0/15:53 {\n    whoami\n}\n1.10.in-addr.arpa:53 {\n    whoami\n}\n", "cannot serve dns://1.10.in-addr.arpa.:53"},
		{"two keys in a block", "a:53, b:53 {\n    whoami\n}\nb:53 {\n    whoami\n}\n", "Corefile:4: cannot serve dns://b.:53"},
		{"view blocks may share a zone", ".:53 {\n    view v {\n        expr type() == 'A'\n    }\n    whoami\n}\n.:53 {\n    whoami\n}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate([]byte(tc.corefile), testDirectives)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Validate: nil, want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

var testParams = Params{
	LocalIPs:           []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("10.96.0.10")},
	DNSPort:            53,
	ClusterDNS:         "10.96.128.5",
	ClusterDNSEnv:      "KUBE_DNS_UPSTREAM_SERVICE_HOST",
	PrometheusEndpoint: ":9253",
	Directives:         testDirectives,
}

// The directive list is the caller's: a directive CoreDNS knows but the list leaves out is unknown, and no
// list at all is refused rather than read as "everything is unknown".
func TestValidateUsesTheGivenDirectives(t *testing.T) {
	cf := []byte(".:53 {\n    errors\n    kubernetes cluster.local\n}\n")
	if err := Validate(cf, testDirectives); err != nil {
		t.Fatalf("Validate with CoreDNS's list = %v, want nil", err)
	}
	if err := Validate(cf, []string{"errors"}); err == nil || !strings.Contains(err.Error(), "Corefile:3 - Error during parsing: Unknown directive 'kubernetes'") {
		t.Errorf("Validate without kubernetes in the list = %v, want it unknown on line 3", err)
	}
	if err := Validate(cf, nil); err == nil || !strings.Contains(err.Error(), "no directive list") {
		t.Errorf("Validate with no list = %v, want it refused as such", err)
	}
}

const testBase = ".:53 {\n    bind __PILLAR__LOCAL__DNS__\n    forward . __PILLAR__UPSTREAM__SERVERS__\n}\n"

// A KubeDNS built by hand (not through LoadKubeDNS) is validated by Render all the same.
func TestRenderRevalidatesKubeDNS(t *testing.T) {
	for _, kd := range []KubeDNS{
		{StubDomains: map[string][]string{"a.com": {"1.1.1.1 }\n. {\n whoami"}}},
		{StubDomains: map[string][]string{"a.com:53 {\n whoami\n}\nb.com": {"1.1.1.1"}}},
		{StubDomains: map[string][]string{"a.com": nil}},
		{UpstreamNameservers: []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"}},
		{UpstreamNameservers: []string{"/etc/hosts"}},
	} {
		if out, err := Render([]byte(testBase), kd, testParams); err == nil {
			t.Errorf("Render(%+v) accepted it:\n%s", kd, out)
		}
	}
}

func TestRenderParams(t *testing.T) {
	stub := KubeDNS{StubDomains: map[string][]string{"acme.local": {"192.0.2.1"}}}
	for _, tc := range []struct {
		name    string
		base    string
		kd      KubeDNS
		mutate  func(*Params)
		wantErr string
	}{
		{"zoned local IP", testBase, KubeDNS{}, func(p *Params) { p.LocalIPs = []netip.Addr{netip.MustParseAddr("fe80::1%eth0")} }, "local IP"},
		{"invalid local IP", testBase, KubeDNS{}, func(p *Params) { p.LocalIPs = []netip.Addr{{}} }, "local IP"},
		{"no local IP for the variable", testBase, KubeDNS{}, func(p *Params) { p.LocalIPs = nil }, "line 2: __PILLAR__LOCAL__DNS__ needs -localip"},
		{"no local IP for stub blocks", ".:53 {\n    whoami\n}\n", stub, func(p *Params) { p.LocalIPs = nil }, "stub domains need local IPs"},
		{"no port for stub blocks", testBase, stub, func(p *Params) { p.DNSPort = 0 }, "stub domains need local IPs and a DNS port"},
		{"cluster DNS unset, env named", ".:53 {\n    forward . __PILLAR__CLUSTER__DNS__\n}\n", KubeDNS{}, func(p *Params) { p.ClusterDNS = "" },
			"KUBE_DNS_UPSTREAM_SERVICE_HOST is not set"},
		{"cluster DNS with text", testBase, KubeDNS{}, func(p *Params) { p.ClusterDNS = "10.0.0.1 {" }, "not an IP address"},
		{"prometheus endpoint with a brace", testBase, KubeDNS{}, func(p *Params) { p.PrometheusEndpoint = ":9253 }" }, "prometheus endpoint"},
		{"prometheus endpoint empty but used", ".:53 {\n    prometheus __PROMETHEUS__ENDPOINT__\n}\n", KubeDNS{}, func(p *Params) { p.PrometheusEndpoint = "" },
			"-prometheus-listen-address"},
		{"unknown variable", ".:53 {\n    forward . __PILLAR__FOO__\n}\n", KubeDNS{}, nil, `unknown template variable in "__PILLAR__FOO__"`},
		{"not UTF-8", ".:53 {\n    whoami \xff\n}\n", KubeDNS{}, nil, "not valid UTF-8"},
		{"base ends inside a quote", ".:53 {\n    whoami\n}\n\"x", stub, nil, "rendered Corefile"},
		{"variable split by a carriage return", ".:53 {\n    forward . __PILLAR__CLUSTER\r__DNS__\n}\n", KubeDNS{}, nil,
			`Corefile:2: template variable left in "__PILLAR__CLUSTER__DNS__"`},
		{"stub domain equal to a port-less base zone", "acme.local {\n    whoami\n}\n", stub, nil,
			"Corefile:5: cannot serve dns://acme.local.:53 on 169.254.20.10 - zone overlap listener capacity with dns://acme.local.:53 (line 1)"},
		{"variables run together", ".:53 {\n    bind __PILLAR__DNS__SERVER__PILLAR__LOCAL__DNS__\n}\n", KubeDNS{}, nil, ""},
		// Unset values are fine when the template does not use them, even in a comment.
		{"unused values", "# __PILLAR__CLUSTER__DNS__\n.:53 {\n    whoami\n}\n", KubeDNS{}, func(p *Params) {
			p.ClusterDNS, p.PrometheusEndpoint, p.LocalIPs = "", "", nil
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testParams
			if tc.mutate != nil {
				tc.mutate(&p)
			}
			out, err := Render([]byte(tc.base), tc.kd, p)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Render: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Render accepted it, want an error containing %q:\n%s", tc.wantErr, out)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Render: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// Stub blocks come in one order whatever Go's map iteration does; node-cache's came in random order.
func TestRenderDeterministic(t *testing.T) {
	kd := KubeDNS{StubDomains: map[string][]string{}}
	for _, d := range strings.Fields("q w e r t y u i o p a s d f g h j k l z x c v b n m") {
		kd.StubDomains[d+".example"] = []string{"192.0.2.1"}
	}
	first, err := Render([]byte(testBase), kd, testParams)
	if err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(string(first), "a.example:53"), strings.Index(string(first), "z.example:53"); i < 0 || j < i {
		t.Fatalf("stub blocks not sorted:\n%s", first)
	}
	for range 20 {
		again, err := Render([]byte(testBase), kd, testParams)
		if err != nil || string(again) != string(first) {
			t.Fatalf("render %v differs:\n%s", err, again)
		}
	}
}
