package fastpath

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the fast path's own series, nodelocaldns_fastpath_*: how the load batched its readers' receives,
// and the panics they contained (panic.go); and its share of CoreDNS's histograms (histogram.go). A Path counts
// into the Metrics it is made with; the agent registers them with the registry it serves (cmd/nodelocaldns),
// beside CoreDNS's, and serves that registry through Gatherer. A test reads them unregistered.
type Metrics struct {
	// receives and received count the readers' recvmmsg calls and the datagrams they returned: their ratio is
	// the batch size the load formed.
	receives, received atomic.Uint64
	panics             atomic.Uint64
	hists              histSet
}

// NewMetrics returns counters at zero, registered nowhere.
func NewMetrics() *Metrics { return &Metrics{} }

// Register exports m through reg, read at scrape time.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	return errors.Join(
		reg.Register(counterFunc("nodelocaldns_fastpath_receives_total", "The fast path readers' receive calls (recvmmsg).", &m.receives)),
		reg.Register(counterFunc("nodelocaldns_fastpath_received_datagrams_total", "Datagrams the fast path's readers received.", &m.received)),
		reg.Register(counterFunc("nodelocaldns_fastpath_panics_total",
			"Panics the fast path recovered from while handling a datagram (the datagram went to CoreDNS).", &m.panics)),
	)
}

// Gatherer is g with the fast path's share of CoreDNS's histograms added to CoreDNS's series in it: what the
// agent serves wherever it serves g.
func (m *Metrics) Gatherer(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		m.hists.addTo(mfs)
		return mfs, err
	})
}

func counterFunc(name, help string, c *atomic.Uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(c.Load()) })
}
