package fastpath_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
)

// The fast path's own series are registered where the agent says, under the names dashboards and bench/serve
// read, and count what the Path made with them does; registering them twice is an error the caller sees.
func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := fastpath.NewMetrics()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(reg); err == nil {
		t.Error("registering the same series twice: no error")
	}
	up := startUpstream(t)
	_, addr := startCoreDNSOn(t, "cache 30\n forward . "+up.Addr, nil, m)
	for range 3 {
		ask(t, addr, "counted.example.")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	for name, atLeast := range map[string]float64{
		"nodelocaldns_fastpath_receives_total":           1,
		"nodelocaldns_fastpath_received_datagrams_total": 3,
		"nodelocaldns_fastpath_panics_total":             0,
	} {
		mf := got[name]
		if mf == nil || mf.GetType() != dto.MetricType_COUNTER || len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) != 0 {
			t.Errorf("%s: %v, want one counter without labels", name, mf)
			continue
		}
		if v := mf.GetMetric()[0].GetCounter().GetValue(); v < atLeast {
			t.Errorf("%s = %v after 3 queries, want at least %v", name, v, atLeast)
		}
		delete(got, name)
	}
	if len(got) != 0 {
		t.Errorf("series beyond the fast path's own: %v", got)
	}
}
