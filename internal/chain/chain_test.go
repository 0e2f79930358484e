package chain_test

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
	ot "github.com/opentracing/opentracing-go"
	"github.com/opentracing/opentracing-go/mocktracer"

	"github.com/nodelocaldns/nodelocaldns/internal/chain"
)

// named answers every query, as the plugin of its name.
type named string

func (n named) Name() string { return string(n) }

func (n named) ServeDNS(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	m := new(dns.Msg)
	m.SetReply(r)
	return dns.RcodeSuccess, w.WriteMsg(m)
}

// through is a plugin that passes every query on with pass.
type through struct {
	name string
	next plugin.Handler
	pass func(string, plugin.Handler, context.Context, dns.ResponseWriter, *dns.Msg) (int, error)
}

func (t through) Name() string { return t.name }

func (t through) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	return t.pass(t.name, t.next, ctx, w, r)
}

// The prometheus plugin's recorder names the same plugin whichever way the plugins between it and the answer
// pass the query on: what coredns_dns_responses_total's plugin label says does not change.
func TestPluginLabelAsNextOrFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chain func(pass func(string, plugin.Handler, context.Context, dns.ResponseWriter, *dns.Msg) (int, error)) plugin.Handler
	}{
		{"answered after two plugins", func(pass func(string, plugin.Handler, context.Context, dns.ResponseWriter, *dns.Msg) (int, error)) plugin.Handler {
			return through{"cache", through{"loop", named("forward"), pass}, pass}
		}},
		{"answered by the plugin after prometheus", func(pass func(string, plugin.Handler, context.Context, dns.ResponseWriter, *dns.Msg) (int, error)) plugin.Handler {
			return named("cache")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			label := func(pass func(string, plugin.Handler, context.Context, dns.ResponseWriter, *dns.Msg) (int, error)) string {
				rec := metrics.NewRecorder(&dnstest.Recorder{ResponseWriter: &test.ResponseWriter{}})
				r := new(dns.Msg)
				r.SetQuestion("example.org.", dns.TypeA)
				// The prometheus handler passes the query on through NextOrFailure, as ours does.
				if _, err := plugin.NextOrFailure("prometheus", tc.chain(pass), context.Background(), rec, r); err != nil {
					t.Fatal(err)
				}
				return rec.Plugin
			}
			got, want := label(chain.Next), label(plugin.NextOrFailure)
			if got != want || got == "" {
				t.Errorf("plugin label %q, want %q as through NextOrFailure", got, want)
			}
		})
	}
}

// Handed the recorder itself, Next names the next plugin to it, as NextOrFailure does.
func TestNextTellsAListeningWriter(t *testing.T) {
	rec := metrics.NewRecorder(&dnstest.Recorder{ResponseWriter: &test.ResponseWriter{}})
	r := new(dns.Msg)
	r.SetQuestion("example.org.", dns.TypeA)
	if _, err := chain.Next("prometheus", named("forward"), context.Background(), rec, r); err != nil {
		t.Fatal(err)
	}
	if rec.Plugin != "forward" {
		t.Errorf("plugin %q, want forward", rec.Plugin)
	}
}

// With a trace being recorded, the next plugin gets its span as through NextOrFailure.
func TestNextKeepsTraceSpans(t *testing.T) {
	tracer := mocktracer.New()
	root := tracer.StartSpan("query")
	ctx := ot.ContextWithSpan(context.Background(), root)
	r := new(dns.Msg)
	r.SetQuestion("example.org.", dns.TypeA)
	if _, err := chain.Next("cache", named("forward"), ctx, &test.ResponseWriter{}, r); err != nil {
		t.Fatal(err)
	}
	root.Finish()
	var names []string
	for _, s := range tracer.FinishedSpans() {
		names = append(names, s.OperationName)
	}
	if len(names) != 2 || names[0] != "forward" {
		t.Errorf("spans %v, want forward's then the query's", names)
	}
}

// Without a next plugin, the same failure as NextOrFailure.
func TestNextWithoutNext(t *testing.T) {
	code, err := chain.Next("cache", nil, context.Background(), &test.ResponseWriter{}, new(dns.Msg))
	wantCode, wantErr := plugin.NextOrFailure("cache", nil, context.Background(), &test.ResponseWriter{}, new(dns.Msg))
	if code != wantCode || err == nil || err.Error() != wantErr.Error() {
		t.Errorf("%d %v, want %d %v", code, err, wantCode, wantErr)
	}
}

// Passing a query on allocates nothing where NextOrFailure allocates its writer.
func TestNextAllocatesNothing(t *testing.T) {
	w := &test.ResponseWriter{}
	r := new(dns.Msg)
	var next plugin.Handler = passes{}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { chain.Next("cache", next, ctx, w, r) }); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
	if n := testing.AllocsPerRun(100, func() { plugin.NextOrFailure("cache", next, ctx, w, r) }); n == 0 {
		t.Error("NextOrFailure allocates nothing either: the package has no reason to be")
	}
}

// passes answers nothing and allocates nothing.
type passes struct{}

func (passes) Name() string { return "fairshare" }

func (passes) ServeDNS(context.Context, dns.ResponseWriter, *dns.Msg) (int, error) {
	return dns.RcodeSuccess, nil
}
