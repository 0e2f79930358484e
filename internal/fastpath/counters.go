package fastpath

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the fast path's own series, nodelocaldns_fastpath_*: how the load batched its readers' receives,
// and the panics they contained (panic.go). A Path counts into the Metrics it is made with; the agent registers
// them with the registry it serves (cmd/nodelocaldns), beside CoreDNS's, and a test reads them unregistered.
type Metrics struct {
	// receives and received count the readers' recvmmsg calls and the datagrams they returned: their ratio is
	// the batch size the load formed.
	receives, received atomic.Uint64
	panics             atomic.Uint64
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

func counterFunc(name, help string, c *atomic.Uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(c.Load()) })
}
