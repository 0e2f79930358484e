package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// RuleCounter is one nftables rule's counter: the packets that skipped conntrack or were accepted.
type RuleCounter struct {
	Chain, Comment string
	Packets, Bytes uint64
}

// RuleCounterCollector exports the counters of our table's rules, read from the kernel at scrape time so the
// numbers are the kernel's and nothing polls between scrapes. It reads through the agent's own nftables
// connection, which exists only once the supervisor has opened it: until [RuleCounterCollector.SetSource] it
// exports nothing.
type RuleCounterCollector struct {
	read atomic.Pointer[func() ([]RuleCounter, error)]
}

// SetSource sets where Collect reads the counters; nil exports nothing again.
func (c *RuleCounterCollector) SetSource(read func() ([]RuleCounter, error)) {
	if read == nil {
		c.read.Store(nil)
		return
	}
	c.read.Store(&read)
}

var (
	packetsDesc = prometheus.NewDesc("nodelocaldns_nftables_packets_total",
		"Packets matched by a rule of table inet nodelocaldns (notrack: skipped conntrack; accept: allowed).", []string{"chain", "rule"}, nil)
	bytesDesc = prometheus.NewDesc("nodelocaldns_nftables_bytes_total",
		"Bytes matched by a rule of table inet nodelocaldns.", []string{"chain", "rule"}, nil)
)

func (c *RuleCounterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- packetsDesc
	ch <- bytesDesc
}

func (c *RuleCounterCollector) Collect(ch chan<- prometheus.Metric) {
	read := c.read.Load()
	if read == nil {
		return
	}
	counters, err := (*read)()
	if err != nil {
		// Leave the counters out of this scrape rather than fail it: the same registry backs CoreDNS's own
		// prometheus endpoint, whose handler answers 500 to any collector error, and a read can race with a
		// repair (a chain deleted between listing chains and reading its rules).
		return
	}
	for _, rc := range counters {
		ch <- prometheus.MustNewConstMetric(packetsDesc, prometheus.CounterValue, float64(rc.Packets), rc.Chain, rc.Comment)
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(rc.Bytes), rc.Chain, rc.Comment)
	}
}
