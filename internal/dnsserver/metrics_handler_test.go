package dnsserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Our handler records what upstream's does: the same queries through each, the coredns_dns_* series they
// moved compared (counters by value, histograms by count and buckets; the duration's buckets aside, which time
// decides).
func TestMetricsHandlerReportsAsUpstream(t *testing.T) {
	ctx := context.WithValue(context.Background(), dnsserver.Key{}, &dnsserver.Server{Addr: "dns://:53"})
	queries := []metricsQuery{
		{name: "a.example.org.", qtype: dns.TypeA, w: &test.ResponseWriter{}, answerSize: 1},
		{name: "A.Example.ORG.", qtype: dns.TypeAAAA, w: &test.ResponseWriter6{}, do: true, answerSize: 2},
		{name: "b.example.org.", qtype: dns.TypeA, w: &test.ResponseWriter{TCP: true}, pad: 64, answerSize: 3},
		{name: "c.example.org.", qtype: dns.TypeNAPTR, w: &test.ResponseWriter{}, rcode: dns.RcodeNameError},
		{name: "outside.test.", qtype: dns.TypeTXT, w: &test.ResponseWriter{}, answerSize: 1},
		{name: "d.example.org.", qtype: dns.TypeA, w: &test.ResponseWriter{}, rcode: dns.RcodeServerFailure, noWrite: true},
		{name: "a.example.org.", qtype: dns.TypeA, w: &test.ResponseWriter{}, answerSize: 1}, // a label set again
	}
	run := func(h plugin.Handler) map[string]string {
		before := gatherDNS(t)
		for _, q := range queries {
			r := new(dns.Msg)
			r.SetQuestion(q.name, q.qtype)
			if q.do || q.pad > 0 {
				r.SetEdns0(1232, q.do)
				if q.pad > 0 {
					r.IsEdns0().Option = append(r.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, q.pad)})
				}
			}
			if _, err := h.ServeDNS(ctx, q.w, r); err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
		}
		return diff(before, gatherDNS(t))
	}
	next := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		q := queries[slices.IndexFunc(queries, func(q metricsQuery) bool {
			return q.name == r.Question[0].Name && q.qtype == r.Question[0].Qtype
		})]
		if q.noWrite {
			return q.rcode, nil
		}
		m := new(dns.Msg)
		m.SetRcode(r, q.rcode)
		for i := range q.answerSize {
			m.Answer = append(m.Answer, test.A(fmt.Sprintf("%s 30 IN A 192.0.2.%d", q.name, i+1)))
		}
		return q.rcode, w.WriteMsg(m)
	})
	handler := func(ours bool) plugin.Handler {
		m := metrics.New("localhost:0")
		m.AddZone("example.org.")
		m.Next = next
		if ours {
			return &metricsHandler{Metrics: m}
		}
		return m
	}
	want := run(handler(false))
	got := run(handler(true))
	if len(want) == 0 {
		t.Fatal("upstream's handler moved no coredns_dns_ series: the comparison proves nothing")
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: ours %q, upstream's %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: ours %q, upstream's nothing", k, v)
		}
	}
}

type metricsQuery struct {
	name       string
	qtype      uint16
	w          dns.ResponseWriter
	do         bool
	pad        int // EDNS0 padding: a larger request
	rcode      int
	noWrite    bool // the next plugin returns rcode without writing (the server writes it)
	answerSize int  // records in the answer
}

// gatherDNS is every coredns_dns_* sample in the default registry (where plugin/metrics/vars registers), by
// name and labels: a counter's value, a histogram's count and (but for the duration) its buckets.
func gatherDNS(t *testing.T) map[string]string {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "coredns_dns_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			k := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			out[k] = sample(mf.GetName(), m)
		}
	}
	return out
}

func sample(name string, m *dto.Metric) string {
	if c := m.GetCounter(); c != nil {
		return fmt.Sprint(c.GetValue())
	}
	h := m.GetHistogram()
	if h == nil {
		return ""
	}
	s := fmt.Sprint("count ", h.GetSampleCount())
	if name != "coredns_dns_request_duration_seconds" {
		for _, b := range h.GetBucket() {
			s += fmt.Sprintf(" le%g:%d", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	return s
}

// diff is what moved from before to after, as after's value minus before's for counters and counts (and each
// bucket): a sample new in after counts from zero.
func diff(before, after map[string]string) map[string]string {
	out := map[string]string{}
	for k, a := range after {
		if b, ok := before[k]; !ok || b != a {
			out[k] = minus(a, b)
		}
	}
	return out
}

// minus subtracts b's numbers from a's, field by field (both from sample, of the same series).
func minus(a, b string) string {
	af, bf := strings.Fields(a), strings.Fields(b)
	for i := range af {
		if i >= len(bf) {
			break
		}
		var x, y float64
		prefix := ""
		if j := strings.LastIndexByte(af[i], ':'); j >= 0 {
			prefix = af[i][:j+1]
			fmt.Sscan(af[i][j+1:], &x)
			fmt.Sscan(bf[i][j+1:], &y)
		} else if _, err := fmt.Sscan(af[i], &x); err != nil {
			continue
		} else {
			fmt.Sscan(bf[i], &y)
		}
		af[i] = prefix + fmt.Sprint(x-y)
	}
	return strings.Join(af, " ")
}
