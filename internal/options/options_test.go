package options

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestStandardManifestArgs(t *testing.T) {
	// The DaemonSet args of the standard nodelocaldns.yaml after the documented sed.
	args := []string{"-localip", "169.254.20.10,10.96.0.10", "-conf", "/etc/Corefile", "-upstreamsvc", "kube-dns-upstream", "-pidfile", "/tmp/node-cache.pid"}
	o, err := Parse(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("10.96.0.10")}
	if len(o.LocalIPs) != 2 || o.LocalIPs[0] != want[0] || o.LocalIPs[1] != want[1] {
		t.Errorf("LocalIPs = %v, want %v", o.LocalIPs, want)
	}
	if o.Mode != ModeServe || o.Corefile != "/etc/Corefile" || o.UpstreamSvc != "kube-dns-upstream" || o.PIDFile != "/tmp/node-cache.pid" {
		t.Errorf("unexpected options %+v", o)
	}
	if !o.SetupInterface || !o.SetupNftables || o.InterfaceName != "nodelocaldns" || o.SyncInterval != time.Minute ||
		o.DNSPort != 53 || o.HealthPort != 8080 || o.MetricsListenAddress != "0.0.0.0:9353" ||
		o.PrometheusListenAddress != ":9253" || o.BaseCorefile != "/etc/coredns/Corefile.base" {
		t.Errorf("defaults differ from node-cache's: %+v", o)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(*Options) bool
	}{
		{"double dash", []string{"--localip=169.254.20.10", "--dns.port=5353"}, func(o *Options) bool { return o.DNSPort == 5353 }},
		{"p shorthand", []string{"-localip", "127.0.0.2", "-p", "1053"}, func(o *Options) bool { return o.DNSPort == 1053 }},
		{"dual-stack", []string{"-localip", "169.254.20.10,fd00::10"}, func(o *Options) bool { return len(o.LocalIPs) == 2 && o.LocalIPs[1].Is6() }},
		{"syncinterval seconds", []string{"-localip", "1.2.3.4", "-syncinterval", "30"}, func(o *Options) bool { return o.SyncInterval == 30*time.Second }},
		{"syncinterval duration", []string{"-localip", "1.2.3.4", "-syncinterval", "1h"}, func(o *Options) bool { return o.SyncInterval == time.Hour }},
		{"setupiptables alias", []string{"-localip", "1.2.3.4", "-setupiptables=false"}, func(o *Options) bool { return !o.SetupNftables }},
		{"conf beats corefile", []string{"-localip", "1.2.3.4", "-corefile", "/a", "-conf", "/b"}, func(o *Options) bool { return o.Corefile == "/b" }},
		{"corefile used without conf", []string{"-localip", "1.2.3.4", "-corefile", "/a"}, func(o *Options) bool { return o.Corefile == "/a" }},
		{"version without localip", []string{"-version"}, func(o *Options) bool { return o.Mode == ModeVersion }},
		{"plugins without localip", []string{"--plugins"}, func(o *Options) bool { return o.Mode == ModePlugins }},
		{"teardown without localip", []string{"-teardown", "-interfacename", "nld0"}, func(o *Options) bool { return o.Mode == ModeTeardown && o.InterfaceName == "nld0" }},
		{"print-rules", []string{"-print-rules", "-localip", "169.254.20.10"}, func(o *Options) bool { return o.Mode == ModePrintRules }},
		{"health socket", []string{"-localip", "1.2.3.4", "-health-socket", "/run/nodelocaldns/health.sock"}, func(o *Options) bool {
			return o.Mode == ModeServe && o.HealthSocket == "/run/nodelocaldns/health.sock"
		}},
		{"probe without localip", []string{"-probe", "/ready", "-health-socket", "/run/h.sock"}, func(o *Options) bool { return o.Mode == ModeProbe && o.Probe == "/ready" }},
		{"top on the manifests' socket", []string{"-top"}, func(o *Options) bool {
			return o.Mode == ModeTop && o.HealthSocket == DefaultHealthSocket && o.TopN == 20 && !o.TopJSON
		}},
		{"top -json on a socket", []string{"-top", "-json", "-top-n", "5", "-health-socket", "/run/h.sock"}, func(o *Options) bool {
			return o.Mode == ModeTop && o.HealthSocket == "/run/h.sock" && o.TopN == 5 && o.TopJSON
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Parse(tc.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(o) {
				t.Errorf("Parse(%q) = %+v", tc.args, o)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the flag and the value must both be named
	}{
		{[]string{}, "-localip is required"},
		{[]string{"-localip", "169.254.20.300"}, `"169.254.20.300" is not an IP address`},
		{[]string{"-localip", "1.2.3.4,1.2.3.4"}, "listed twice"},
		{[]string{"-localip", "0.0.0.0"}, "local IP 0.0.0.0: unspecified address"},
		{[]string{"-localip", "fe80::1%eth0"}, `invalid value "fe80::1%eth0" for flag -localip: local IP fe80::1%eth0: IPv6 zones are not supported`},
		{[]string{"-localip", "1.2.3.4", "-interfacename", "ifb0"}, `invalid value "ifb0" for flag -interfacename: interface name "ifb0" is reserved`},
		{[]string{"-localip", "1.2.3.4", "-syncinterval", "soon"}, `invalid value "soon" for flag -syncinterval`},
		{[]string{"-localip", "1.2.3.4", "-syncinterval", "0"}, `invalid value "0" for flag -syncinterval`},
		// Seconds that overflow time.Duration once multiplied (to 290 ms here), and the largest that does not.
		{[]string{"-localip", "1.2.3.4", "-syncinterval", "18446744074"}, `invalid value "18446744074" for flag -syncinterval: want more than 0 and at most 24h0m0s`},
		{[]string{"-localip", "1.2.3.4", "-syncinterval", "9223372037"}, `invalid value "9223372037" for flag -syncinterval`},
		{[]string{"-localip", "1.2.3.4", "-syncinterval", "86401"}, `invalid value "86401" for flag -syncinterval`},
		{[]string{"-localip", "1.2.3.4", "-health-port", "http"}, `invalid value "http" for flag -health-port`},
		{[]string{"-localip", "1.2.3.4", "-dns.port", "70000"}, `invalid value "70000" for flag -dns.port`},
		{[]string{"-localip", "1.2.3.4", "-interfacename", "a-very-long-interface-name"}, `invalid value "a-very-long-interface-name" for flag -interfacename`},
		{[]string{"-localip", "1.2.3.4", "-setupinterface=maybe"}, `invalid boolean value "maybe" for -setupinterface`},
		{[]string{"-localip", "1.2.3.4", "-log-level", "loud"}, `invalid value "loud" for flag -log-level`},
		{[]string{"-probe", "/metrics", "-health-socket", "/run/h.sock"}, `invalid value "/metrics" for flag -probe: want /health or /ready`},
		{[]string{"-probe", "/health"}, "flag -probe needs -health-socket"},
		{[]string{"-localip", "1.2.3.4", "-health-socket", "/" + strings.Repeat("x", 107)}, "for flag -health-socket: a Unix socket path is at most 107 bytes"},
		{[]string{"-top", "-top-n", "0"}, "invalid value 0 for flag -top-n"},
		{[]string{"-json"}, "flag -json needs -top"},
		{[]string{"-nosuchflag"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"-localip", "1.2.3.4", "stray"}, `unexpected argument "stray"`},
	} {
		_, err := Parse(tc.args, nil)
		if err == nil {
			t.Errorf("Parse(%q): no error, want %q", tc.args, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) error = %q, want one line containing %q", tc.args, err, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	var buf bytes.Buffer
	if _, err := Parse([]string{"-h"}, &buf); !errors.Is(err, ErrHelp) {
		t.Fatalf("Parse(-h) error = %v, want ErrHelp", err)
	}
	for _, f := range []string{"-localip", "-setupiptables", "-syncinterval", "-dns.port", "-print-rules"} {
		if !strings.Contains(buf.String(), f) {
			t.Errorf("usage lacks %s", f)
		}
	}
}

// Every flag listed as compatibility-only exists, parses with node-cache's spelling, and says so in the usage.
func TestCompatibilityOnlyFlags(t *testing.T) {
	var usage strings.Builder
	if _, err := Parse([]string{"-h"}, &usage); err != ErrHelp {
		t.Fatalf("-h: %v", err)
	}
	values := map[string]string{"setupiptables": "true", "corefile": "/etc/Corefile", "reloadwithsignal": "true", "pidfile": "/tmp/node-cache.pid", "quiet": "true"}
	for name, why := range CompatibilityOnly() {
		if !strings.Contains(usage.String(), "(node-cache compatibility: "+why+")") {
			t.Errorf("-%s: usage does not mark it as compatibility-only:\n%s", name, usage.String())
		}
		v, ok := values[name]
		if !ok {
			t.Errorf("-%s: no test value", name)
			continue
		}
		if _, err := Parse([]string{"-localip", "169.254.20.10", "-" + name + "=" + v}, io.Discard); err != nil {
			t.Errorf("-%s=%s: %v", name, v, err)
		}
	}
}

func TestStartupTaint(t *testing.T) {
	for _, key := range []string{"", "nodelocaldns.io/agent-not-ready", "agent-not-ready", "node.example.com/a_b.c"} {
		o, err := Parse([]string{"-localip", "169.254.20.10", "-startup-taint", key}, nil)
		if err != nil || o.StartupTaint != key {
			t.Errorf("-startup-taint %q: %v, %+v", key, err, o)
		}
	}
	for _, key := range []string{"/agent-not-ready", "Example.com/x", "example.com/", "a/b/c", "-x", "x-", strings.Repeat("a", 64), "a b"} {
		_, err := Parse([]string{"-localip", "169.254.20.10", "-startup-taint", key}, nil)
		if err == nil || !strings.Contains(err.Error(), "flag -startup-taint") || !strings.Contains(err.Error(), strconvQuote(key)) {
			t.Errorf("-startup-taint %q: %v, want an error naming the flag and the value", key, err)
		}
	}
}

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }
