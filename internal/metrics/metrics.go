// Package metrics holds the agent's Prometheus metrics.
//
// node-cache's setup-error counter keeps its name and labels (coredns_nodecache_setup_errors_total, errortype
// iptables, iptables_lock, interface_add, interface_check, configmap, all pre-initialised to zero) so existing
// dashboards and alerts keep working; the iptables labels stay at zero forever, and the label nftables counts
// what replaced them. Everything nodelocaldns adds is under the nodelocaldns_ prefix. Registered with the
// default registry, the series also appear on CoreDNS's own prometheus endpoint, as node-cache's do.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Setup error types, as node-cache labels them, plus nftables.
const (
	ErrIptables       = "iptables"
	ErrIptablesLock   = "iptables_lock"
	ErrInterfaceAdd   = "interface_add"
	ErrInterfaceCheck = "interface_check"
	ErrConfigmap      = "configmap"
	ErrNftables       = "nftables"
)

// Metrics is the agent's set of collectors.
type Metrics struct {
	SetupErrors      *prometheus.CounterVec // errortype
	Passes           *prometheus.CounterVec // trigger, result
	PassDuration     prometheus.Histogram   //
	Repairs          *prometheus.CounterVec // object
	Reloads          *prometheus.CounterVec // result
	ReloadDuration   prometheus.Histogram   //
	ForeignDropChain *prometheus.GaugeVec   // chain
	Ready            prometheus.Gauge       //
	Leader           prometheus.Gauge       //
	ConfigPolling    prometheus.Gauge       // 1 while ConfigMap changes are found by periodic re-reads (no inotify)
	RuleCounters     *RuleCounterCollector  // the table's own counters, read at scrape time
}

// New creates the collectors and registers them with reg. counters reads our nftables rules' counters at
// scrape time; nil leaves them out.
func New(reg prometheus.Registerer, counters func() ([]RuleCounter, error)) (*Metrics, error) {
	m := &Metrics{
		SetupErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "coredns", Subsystem: "nodecache", Name: "setup_errors_total",
			Help: "The number of errors during periodic network setup for node-cache",
		}, []string{"errortype"}),
		Passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "reconcile_passes_total",
			Help: "Reconcile passes by what triggered them and their result (in_sync, repaired, error, standby).",
		}, []string{"trigger", "result"}),
		PassDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "nodelocaldns", Name: "reconcile_duration_seconds",
			Help:    "Duration of reconcile passes.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		Repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "repairs_total",
			Help: "Objects found drifted from the desired state and repaired, by kind (nftables drift kinds, interface).",
		}, []string{"object"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "corefile_reloads_total",
			Help: "In-process CoreDNS reloads after a ConfigMap change or SIGUSR1, by result (reloaded, unchanged, error).",
		}, []string{"result"}),
		ReloadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "nodelocaldns", Name: "corefile_reload_duration_seconds",
			Help:    "Duration from a detected change to the reloaded configuration serving.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		ForeignDropChain: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "foreign_drop_policy",
			Help: "1 for each base chain of another table hooked on input or output with policy drop; our accept rules cannot override it.",
		}, []string{"chain"}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "ready",
			Help: "1 when CoreDNS serves and the nftables table and interface are in place.",
		}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "leader",
			Help: "1 when this instance manages the node's table and interface, 0 while it waits for an older instance to hand over.",
		}),
		ConfigPolling: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "config_watch_polling",
			Help: "1 when inotify is unavailable (its limits exhausted) and the ConfigMap directories are re-read periodically instead.",
		}),
	}
	for _, t := range []string{ErrIptables, ErrIptablesLock, ErrInterfaceAdd, ErrInterfaceCheck, ErrConfigmap, ErrNftables} {
		m.SetupErrors.WithLabelValues(t)
	}
	cs := []prometheus.Collector{m.SetupErrors, m.Passes, m.PassDuration, m.Repairs, m.Reloads, m.ReloadDuration, m.ForeignDropChain, m.Ready, m.Leader, m.ConfigPolling}
	if counters != nil {
		m.RuleCounters = &RuleCounterCollector{read: counters}
		cs = append(cs, m.RuleCounters)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ConfigPollingGauge is m.ConfigPolling, or nil when nothing is counted (m nil).
func (m *Metrics) ConfigPollingGauge() prometheus.Gauge {
	if m == nil {
		return nil
	}
	return m.ConfigPolling
}
