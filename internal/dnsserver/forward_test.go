package dnsserver

import (
	"slices"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/forward"
)

// TestForwardDefault: by default each forward directive line of the Corefile handed to caddy names ours; with
// NODELOCALDNS_FORWARD=coredns (and only then) the Corefile is handed to caddy as written, CoreDNS's forward. Ours, and nothing else changes (a zone or an option containing the word included).
// Directives and Plugins show forward either way, never our internal name.
func TestForwardDefault(t *testing.T) {
	env := func(v string) func(string) string { return func(string) string { return v } }
	for v, want := range map[string]bool{"": true, "pipelined": true, "coredns": false} {
		if got := forward.Pipelined(env(v)); got != want {
			t.Errorf("%s=%q: ours %v, want %v", forward.Env, v, got, want)
		}
	}
	const cf = "forward.example:53 {\n  forward . 10.0.0.10 {\n    force_tcp\n  }\n}\n.:53 {\n  forward . /etc/resolv.conf\n}\n"
	def, err := rewrite([]byte(cf), "Corefile", []rename{newRename(userMetrics, metricsDirective, false)})
	if err != nil || string(def) != cf {
		t.Errorf("coredns: %q, %v; want the Corefile unchanged", def, err)
	}
	on, err := rewrite([]byte(cf), "Corefile", []rename{newRename(userMetrics, metricsDirective, false), newRename(userForward, forwardDirective, true)})
	want := "forward.example:53 {\n  forward_nodelocaldns . 10.0.0.10 {\n    force_tcp\n  }\n}\n.:53 {\n  forward_nodelocaldns . /etc/resolv.conf\n}\n"
	if err != nil || string(on) != want {
		t.Errorf("ours: %q, %v; want %q", on, err, want)
	}
	for _, list := range [][]string{Directives(), Plugins()} {
		if !slices.Contains(list, userForward) || slices.Contains(list, forwardDirective) {
			t.Errorf("%v: want forward and not %s", list, forwardDirective)
		}
	}
	if d := dnsserverDirectives(); slices.Index(d, forwardDirective) != slices.Index(d, userForward)-1 ||
		slices.Index(d, "fairshare") != slices.Index(d, forwardDirective)-1 {
		t.Errorf("order %v: want fairshare, %s, forward", d, forwardDirective)
	}
}

// dnsserverDirectives is the order caddy runs, our internal names included.
func dnsserverDirectives() []string {
	register()
	return slices.Clone(coreDirectives())
}
