package dnsserver

import (
	"slices"
	"strings"
	"sync"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"

	"github.com/nodelocaldns/nodelocaldns/internal/fairshare"
	"github.com/nodelocaldns/nodelocaldns/internal/forward"

	// The compiled-in plugins: node-cache's set (kubernetes-sigs/node-local-dns), plus ready. This import list
	// is the one place they are named; Plugins and Directives read what these packages registered. reload,
	// health and loop are ours (reload.go, health.go, loop.go): the upstream ones misbehave when CoreDNS is
	// embedded and reloaded in-process, and upstream's loop exits the process. cache is ours too
	// (internal/dnscache, CoreDNS's cache with bounded entries and an API the fast path answers from).
	// fairshare is ours and new (internal/fairshare): it goes just before forward in the order. Our forward
	// (internal/forward, CoreDNS's directive over our transport to kube-dns, internal/upstream) runs by default,
	// CoreDNS's when NODELOCALDNS_FORWARD=coredns asks for it (forward.go).
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/bufsize"
	_ "github.com/coredns/coredns/plugin/debug"
	_ "github.com/coredns/coredns/plugin/dns64"
	_ "github.com/coredns/coredns/plugin/dnstap"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metadata"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/pprof"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/template"
	_ "github.com/coredns/coredns/plugin/timeouts"
	_ "github.com/coredns/coredns/plugin/trace"
	_ "github.com/coredns/coredns/plugin/whoami"
)

// register adds our directives to caddy's registry (which is per process: caddy and CoreDNS keep it in
// package variables) and narrows CoreDNS's directive list, which caddy parses every Corefile with, to the
// compiled-in plugins, so that a Corefile naming one we do not ship fails with "Unknown directive" instead of
// being silently ignored. Everything that reads either list calls it first.
var register = sync.OnceFunc(func() {
	plugin.Register("reload", setupReload)
	plugin.Register("health", setupHealth)
	plugin.Register("loop", setupLoop)
	plugin.Register(metricsDirective, setupPrometheus)
	plugin.Register(fairshare.Name, func(c *caddy.Controller) error { return fairshare.Setup(envOf().fair())(c) })
	plugin.Register(forwardDirective, func(c *caddy.Controller) error {
		return forward.SetupWith(envOf().forward, func(c *caddy.Controller, f *forward.Forward) {
			p := pendingFor(c)
			p.forwards = append(p.forwards, f)
		})(c)
	})
	registerCache()
	compiled := registered()
	dirs := slices.DeleteFunc(slices.Clone(dnsserver.Directives), func(d string) bool {
		return !slices.Contains(compiled, d)
	})
	// Ours runs in upstream's place, and caddy is handed Corefiles that name it (prometheus.go). Upstream's name
	// stays after it: CoreDNS finds a block's handlers by the names in this list (Config.Handlers), and the
	// handler, upstream's, is named prometheus.
	dirs = slices.Insert(dirs, slices.Index(dirs, userMetrics), metricsDirective)
	// Just before forward: after cache (only misses take a slot) and after every plugin that answers itself.
	dirs = slices.Insert(dirs, slices.Index(dirs, userForward), fairshare.Name)
	// Ours (unless CoreDNS's is asked for) in upstream's place (after fairshare), its handler named forward as upstream's is.
	dnsserver.Directives = slices.Insert(dirs, slices.Index(dirs, userForward), forwardDirective)
	caddy.AppName, caddy.AppVersion = "CoreDNS", CoreDNSVersion()
	caddy.Quiet, dnsserver.Quiet = true, true
})

// registered lists the plugins registered for CoreDNS's server type, by directive name ("prometheus" is the
// metrics plugin's and "forward" upstream's; ours, metricsDirective and forwardDirective, stand for them and are
// left out), sorted.
func registered() []string {
	var names []string
	for _, p := range caddy.ListPlugins()["others"] {
		if name, ok := strings.CutPrefix(p, "dns."); ok && name != metricsDirective && name != forwardDirective {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Plugins lists the compiled-in plugins, sorted, as `-plugins` prints them.
func Plugins() []string {
	register()
	return registered()
}

// Directives is CoreDNS's execution order restricted to the compiled-in plugins: the list the embedded CoreDNS
// parses every Corefile with, at start and at each reload. Validate a Corefile against it
// (corefile.Params.Directives), and it fails exactly when CoreDNS would, with the same message.
func Directives() []string {
	register()
	return slices.DeleteFunc(slices.Clone(dnsserver.Directives), func(d string) bool { return d == metricsDirective || d == forwardDirective })
}
