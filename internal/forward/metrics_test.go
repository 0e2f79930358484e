package forward_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nodelocaldns/nodelocaldns/internal/forward"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestSeriesLikeCoreDNS: a query through our transport counts into CoreDNS's own coredns_proxy_* series (one
// collector each, shared with CoreDNS's proxy package), under forward's labels, and forward's own two series
// are exported.
func TestSeriesLikeCoreDNS(t *testing.T) {
	addr, _ := testenv.ServeDNS(t, "127.0.0.1:0", answer("192.0.2.1"))
	h, err := instance(t, ourSetup, "forward . "+addr+" {\nforce_tcp\n}")
	if err != nil {
		t.Fatal(err)
	}
	if got := run(diffCase{}, h); !strings.Contains(got, "192.0.2.1") {
		t.Fatalf("no answer: %s", got)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"coredns_proxy_request_duration_seconds", map[string]string{"proxy_name": "forward", "to": addr, "rcode": "NOERROR"}, 1},
		{"coredns_proxy_conn_cache_hits_total", map[string]string{"proxy_name": "forward", "to": addr, "proto": "tcp"}, 1},
		{"coredns_proxy_conn_cache_misses_total", map[string]string{"proxy_name": "forward", "to": addr, "proto": "tcp"}, 1},
		{"coredns_forward_max_concurrent_rejects_total", nil, 0},
		{"coredns_forward_healthcheck_broken_total", nil, 0},
	} {
		v, ok := value(t, c.name, c.labels)
		if !ok {
			t.Errorf("%s%v not exported", c.name, c.labels)
		} else if v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
	}
}

// value is the series' value (a histogram's count) in the default registry.
func value(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if len(got) != len(labels) {
				continue
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			default:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// ourSetup is the directive's setup as the tests run it, counting into the default registry (value reads it).
var ourSetup = forward.Setup(forward.NewMetrics(prometheus.DefaultRegisterer))
