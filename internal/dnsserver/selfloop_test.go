package dnsserver

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSelfForward(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.0.0.2\nnameserver 169.254.20.10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The standard node-local block, with its forward target filled in.
	block := func(to string) string {
		return "cluster.local:53 {\n  errors\n  cache 30\n  bind 169.254.20.10 10.96.0.10\n  forward . " + to + " {\n    force_tcp\n  }\n  loop\n}\n"
	}
	for _, c := range []struct {
		name, corefile, upstream string // upstream: the TO the loop is found at, empty for none
	}{
		{"kube-dns-upstream", block("10.96.0.11"), ""},
		{"the link-local address", block("169.254.20.10"), "169.254.20.10"},
		{"the ClusterIP it also serves", block("10.96.0.10"), "10.96.0.10"},
		{"its own address, port spelled out", block("dns://169.254.20.10:53"), "dns://169.254.20.10:53"},
		{"itself second", block("10.96.0.11 169.254.20.10"), "169.254.20.10"},
		{"a resolv.conf naming it", block(resolv), resolv},
		{"its address on another port", block("169.254.20.10:5353"), ""},
		{"another transport", block("tls://169.254.20.10"), ""},
		{"IPv6", "cluster.local:53 {\n  bind fd00::10\n  forward . [fd00::10]:53\n}\n", "[fd00::10]:53"},
		{"the port from the key", "example.org:1053 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:1053\n}\n", "127.0.0.1:1053"},
		{"the default port", "example.org {\n  bind 127.0.0.1\n  forward . 127.0.0.1\n}\n", "127.0.0.1"},
		{"keys on two ports", "example.org:53 example.net:1053 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:1053\n}\n", ""},
		{"keys on one port", "example.org:53 example.net {\n  bind 127.0.0.1\n  forward . 127.0.0.1:53\n}\n", "127.0.0.1:53"},
		{"a second block", ".:53 {\n  bind 127.0.0.1\n  forward . 10.0.0.2\n}\n" + block("169.254.20.10"), "169.254.20.10"},
		// Left to the probe: every address, or a view that may hand the query to another block.
		{"no bind", "example.org:53 {\n  forward . 127.0.0.1\n}\n", ""},
		{"a view", "example.org:53 {\n  bind 127.0.0.1\n  view outer {\n    expr client_ip() != '127.0.0.1'\n  }\n  forward . 127.0.0.1\n}\n", ""},
		{"does not parse", "example.org:53 {\n  bind 127.0.0.1\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := selfForward([]byte(c.corefile), "Corefile", 3)
			switch {
			case c.upstream == "" && e != nil:
				t.Errorf("found %v, want none", e)
			case c.upstream != "" && e == nil:
				t.Errorf("found none, want one at %s", c.upstream)
			case e != nil && (e.Upstream != c.upstream || e.Generation != 3 || e.QName != ""):
				t.Errorf("found %+v, want it at %s in generation 3", e, c.upstream)
			}
		})
	}
}
