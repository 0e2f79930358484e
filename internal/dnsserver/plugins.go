package dnsserver

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"

	// node-cache's plugin set (kubernetes-sigs/node-local-dns), plus ready. reload, health and loop are ours
	// (reload.go, health.go, loop.go): the upstream ones misbehave when CoreDNS is embedded and reloaded
	// in-process, and upstream's loop exits the process.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/bufsize"
	_ "github.com/coredns/coredns/plugin/cache"
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

// pluginNames is the compiled-in set, by directive name. "prometheus" is the metrics plugin's directive.
var pluginNames = []string{
	"bind", "bufsize", "cache", "debug", "dns64", "dnstap", "errors", "forward", "health", "hosts",
	"loadbalance", "log", "loop", "metadata", "pprof", "prometheus", "ready", "reload", "rewrite",
	"template", "timeouts", "trace", "whoami",
}

// Plugins lists the compiled-in plugins, sorted, as `-plugins` prints them.
func Plugins() []string { return slices.Sorted(slices.Values(pluginNames)) }

// directives is CoreDNS's execution order restricted to our plugins, so that a Corefile naming a plugin we do
// not ship fails to parse with "unknown directive" instead of being silently ignored.
func directives() []string {
	return slices.DeleteFunc(slices.Clone(dnsserver.Directives), func(d string) bool {
		return !slices.Contains(pluginNames, d)
	})
}
