package clients

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics' view: the publishTop heaviest clients of the last window as gauges labelled by client (its
// address) and client_pod (its name with -pod-identity, else empty; not "pod", which a scrape gives the agent's
// own pod), a set replaced at every window (a client that leaves the top leaves the scrape), so the series stay
// bounded by publishTop whatever the sources do; and the accounting's own counters.
var (
	topRate = prometheus.NewDesc("nodelocaldns_top_client_answers_per_second",
		"Answers a second over the last window to each of the 10 heaviest clients (by source address; the set is replaced every window).",
		[]string{"client", "client_pod"}, nil)
	topNX = prometheus.NewDesc("nodelocaldns_top_client_nxdomain_per_second",
		"NXDOMAIN answers a second over the last window to each of the 10 heaviest clients.", []string{"client", "client_pod"}, nil)
	topSF = prometheus.NewDesc("nodelocaldns_top_client_servfail_per_second",
		"SERVFAIL answers a second over the last window to each of the 10 heaviest clients.", []string{"client", "client_pod"}, nil)
	topHits = prometheus.NewDesc("nodelocaldns_top_client_hits_per_second",
		"Answers from the cache a second over the last window to each of the 10 heaviest clients.", []string{"client", "client_pod"}, nil)
	answers = prometheus.NewDesc("nodelocaldns_clients_answers_total",
		"Answers the per-client accounting counted.", nil, nil)
	dropped = prometheus.NewDesc("nodelocaldns_clients_dropped_total",
		"Answers the per-client accounting could not count (a fast path reader's ring was full).", nil, nil)
	nsAnswers = prometheus.NewDesc("nodelocaldns_namespace_answers_total",
		"Answers to the clients of each namespace, with pod identity (-pod-identity): the namespaces of the node's pods, \"host network\" and \"unknown\".",
		[]string{"namespace"}, nil)
	nsNX = prometheus.NewDesc("nodelocaldns_namespace_nxdomain_total",
		"NXDOMAIN answers to the clients of each namespace, with pod identity.", []string{"namespace"}, nil)
	nsSF = prometheus.NewDesc("nodelocaldns_namespace_servfail_total",
		"SERVFAIL answers to the clients of each namespace, with pod identity.", []string{"namespace"}, nil)
	tracked = prometheus.NewDesc("nodelocaldns_clients_tracked",
		"Client addresses the per-client accounting holds (at most 1024; the rest are bounded by the smallest count).", nil, nil)
)

// collector exports the last window's snapshot.
type collector struct {
	mu   sync.Mutex
	last Snapshot
}

// Register exports a's metrics through reg; they follow each window (Run).
func (a *Accounting) Register(reg prometheus.Registerer) error {
	c := &collector{}
	if err := reg.Register(c); err != nil {
		return err
	}
	a.OnWindow(func(s Snapshot) {
		c.mu.Lock()
		c.last = s
		c.mu.Unlock()
	})
	return nil
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{topRate, topNX, topSF, topHits, answers, dropped, tracked, nsAnswers, nsNX, nsSF} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s := c.last
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(answers, prometheus.CounterValue, float64(s.Answers))
	ch <- prometheus.MustNewConstMetric(dropped, prometheus.CounterValue, float64(s.Dropped))
	ch <- prometheus.MustNewConstMetric(tracked, prometheus.GaugeValue, float64(s.Tracked))
	for ns, c := range s.Namespaces {
		ch <- prometheus.MustNewConstMetric(nsAnswers, prometheus.CounterValue, float64(c.Answers), ns)
		ch <- prometheus.MustNewConstMetric(nsNX, prometheus.CounterValue, float64(c.NXDomain), ns)
		ch <- prometheus.MustNewConstMetric(nsSF, prometheus.CounterValue, float64(c.ServFail), ns)
	}
	for _, cl := range s.Clients {
		ch <- prometheus.MustNewConstMetric(topRate, prometheus.GaugeValue, cl.Rate, cl.Addr, cl.Name)
		ch <- prometheus.MustNewConstMetric(topNX, prometheus.GaugeValue, cl.NXRate, cl.Addr, cl.Name)
		ch <- prometheus.MustNewConstMetric(topSF, prometheus.GaugeValue, cl.SFRate, cl.Addr, cl.Name)
		ch <- prometheus.MustNewConstMetric(topHits, prometheus.GaugeValue, cl.HitRate, cl.Addr, cl.Name)
	}
}
