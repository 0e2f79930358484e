// Package chain passes a query to the next plugin of a CoreDNS server block as plugin.NextOrFailure does, without
// the writer that call wraps around the response writer where that writer tells no one anything; and an answer
// back to a writer that can take it over (owned.go).
//
// plugin.NextOrFailure wraps the writer in a pluginWriter naming the next plugin, so that the prometheus
// plugin's recorder learns which plugin wrote the answer (coredns_dns_responses_total's plugin label). Only a
// pluginWriter directly around a writer that listens (plugin.PluginTracker: metrics.Recorder is the one) tells
// anything, and the prometheus handler's own call makes that one: a plugin after it is handed a writer already
// wrapped, and its own call's wrapper is an allocation and two more indirect calls per query that change
// nothing. Through Next a miss makes three fewer (cache, loop, fairshare).
//
// May touch: nothing.
package chain

import (
	"context"

	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
	ot "github.com/opentracing/opentracing-go"
)

// Next is plugin.NextOrFailure(name, next, ctx, w, r), calling next.ServeDNS itself when w does not listen
// for the plugin's name and no trace is being recorded (the trace plugin's span for next is NextOrFailure's).
func Next(name string, next plugin.Handler, ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if next == nil || ot.SpanFromContext(ctx) != nil {
		return plugin.NextOrFailure(name, next, ctx, w, r)
	}
	if _, listens := w.(plugin.PluginTracker); listens {
		return plugin.NextOrFailure(name, next, ctx, w, r)
	}
	return next.ServeDNS(ctx, w, r)
}
