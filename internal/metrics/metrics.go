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
	Instances        prometheus.Gauge       //
	FailOpen         *prometheus.GaugeVec   // path
	UnboundLocalIP   *prometheus.GaugeVec   // ip
	Damped           prometheus.Counter     //
	LivenessFailures *prometheus.CounterVec // reason
	ConfigPolling    prometheus.Gauge       // 1 while ConfigMap changes are found by periodic re-reads (no inotify)
	RuleCounters     *RuleCounterCollector  // the table's own counters, read at scrape time
	Foreign          *Foreign               // drop and reject rules of other tables, iptables-legacy tables
}

// New creates the collectors and registers them with reg. counters reads our nftables rules' counters at
// scrape time; nil leaves them out until RuleCounters.SetSource is called (the supervisor does, once its own
// nftables connection, the one that owns our table, is open).
func New(reg prometheus.Registerer, counters func() ([]RuleCounter, error)) (*Metrics, error) {
	m := &Metrics{
		SetupErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "coredns", Subsystem: "nodecache", Name: "setup_errors_total",
			Help: "The number of errors during periodic network setup for node-cache",
		}, []string{"errortype"}),
		Passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "reconcile_passes_total",
			Help: "Reconcile passes by what triggered them and their result (in_sync, repaired, error).",
		}, []string{"trigger", "result"}),
		PassDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "nodelocaldns", Name: "reconcile_duration_seconds",
			Help:    "Duration of reconcile passes.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		Repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "repairs_total",
			Help: "Changes a reconcile pass made to bring the interface back to the desired state (link created or set up, addresses added or removed); object is always interface: our nftables table is owned, so nothing else can change it.",
		}, []string{"object"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "corefile_reloads_total",
			Help: "In-process CoreDNS reloads after a ConfigMap change or SIGUSR1, by result (reloaded, unchanged, error, loop: refused for a forwarding loop).",
		}, []string{"result"}),
		ReloadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "nodelocaldns", Name: "corefile_reload_duration_seconds",
			Help:    "Duration from a detected change to the reloaded configuration serving.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		ForeignDropChain: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "foreign_drop_policy",
			Help: "1 for each base chain of another table hooked on prerouting, input or output with policy drop; our accept rules cannot override it.",
		}, []string{"chain"}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "ready",
			Help: "1 when CoreDNS serves and the nftables table and interface are in place.",
		}),
		Instances: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "instances",
			Help: "Live nodelocaldns instances on the node (owned instance tables), this one included, at the last look.",
		}),
		FailOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "fail_open",
			Help: "1 when queries on this path go to kube-dns while no instance listens: prerouting (pods) is gated on a live listener unless the kernel lacks nft_socket; output (host-network clients) cannot be gated and fails open only when the instance's table goes.",
		}, []string{"path"}),
		UnboundLocalIP: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "unbound_local_ip",
			Help: "1 for a local IP no DNS listener is bound to (the Corefile listens on the wildcard address): queries to it are not intercepted.",
		}, []string{"ip"}),
		Damped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "reconcile_damped_total",
			Help: "Reconcile passes delayed because another writer kept undoing our repairs (each damped pass once).",
		}),
		LivenessFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nodelocaldns", Name: "liveness_failures_total",
			Help: "/health answers that failed, by reason: reconcile or reload (a pass running too long), dns (our listener did not answer).",
		}, []string{"reason"}),
		ConfigPolling: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "config_watch_polling",
			Help: "1 when inotify is unavailable (its limits exhausted) and the ConfigMap directories are re-read periodically instead.",
		}),
	}
	for _, t := range []string{ErrIptables, ErrIptablesLock, ErrInterfaceAdd, ErrInterfaceCheck, ErrConfigmap, ErrNftables} {
		m.SetupErrors.WithLabelValues(t)
	}
	cs := []prometheus.Collector{m.SetupErrors, m.Passes, m.PassDuration, m.Repairs, m.Reloads, m.ReloadDuration, m.ForeignDropChain, m.Ready, m.Instances, m.FailOpen, m.UnboundLocalIP, m.Damped, m.LivenessFailures, m.ConfigPolling}
	m.RuleCounters = &RuleCounterCollector{}
	m.RuleCounters.SetSource(counters)
	cs = append(cs, m.RuleCounters)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	if m.Foreign, err = NewForeign(reg); err != nil {
		return nil, err
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
