// Package metrics holds the agent's Prometheus metrics.
//
// node-cache's setup-error counter keeps its name and labels (coredns_nodecache_setup_errors_total, errortype
// iptables, iptables_lock, interface_add, interface_check, configmap, all pre-initialised to zero) so existing
// dashboards and alerts keep working; the iptables labels stay at zero forever, and the label nftables counts
// what replaced them. Everything nodelocaldns adds is under the nodelocaldns_ prefix. Registered with the
// registry the caller passes (cmd/nodelocaldns passes the default one, which CoreDNS's own prometheus endpoint
// serves too), the series also appear there, as node-cache's do.
//
// May touch: the metrics listener it opens through listenlimit.
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
	NodeCapability   *prometheus.GaugeVec   // name: the preflight's findings (internal/preflight)
	RuleCounters     *RuleCounterCollector  // the table's own counters, read at scrape time
	Foreign          *Foreign               // drop and reject rules of other tables, iptables-legacy tables
	Memory           *Memory                // the Corefile's worst case against the cgroup's memory limit
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
		Passes: counterVec("reconcile_passes_total",
			"Reconcile passes by what triggered them and their result (in_sync, repaired, error).", "trigger", "result"),
		PassDuration: histogram("reconcile_duration_seconds", "Duration of reconcile passes.",
			prometheus.ExponentialBuckets(0.0001, 2, 16)),
		Repairs: counterVec("repairs_total",
			"Changes a reconcile pass made to bring the node back to the desired state, by object: interface (link created or set up, addresses added or removed) or fallback (the link-local fallback table written: created, changed by someone else, or following the live instances' addresses). Our instance table is owned: nothing else can change it.",
			"object"),
		Reloads: counterVec("corefile_reloads_total",
			"In-process CoreDNS reloads after a ConfigMap change or SIGUSR1, by result (reloaded, unchanged, error, loop: refused for a forwarding loop).",
			"result"),
		ReloadDuration: histogram("corefile_reload_duration_seconds",
			"Duration from a detected change to the reloaded configuration serving.", prometheus.ExponentialBuckets(0.0005, 2, 14)),
		ForeignDropChain: gaugeVec("foreign_drop_policy",
			"1 for each base chain of another table hooked on prerouting, input or output with policy drop; our accept rules cannot override it.",
			"chain"),
		Ready: gauge("ready", "1 when CoreDNS serves and the nftables table and interface are in place."),
		Instances: gauge("instances",
			"Live nodelocaldns instances on the node (owned instance tables), this one included, at the last look."),
		FailOpen: gaugeVec("fail_open",
			"1 when queries on this path go to kube-dns while no instance listens: prerouting (pods) is gated on a live listener unless the kernel lacks nft_socket; output (host-network clients) cannot be gated and fails open only when the instance's table goes; link-local: the fallback table covers every local IP (queries to it go to the -upstreamsvc ClusterIP, from pods and host-network clients).",
			"path"),
		UnboundLocalIP: gaugeVec("unbound_local_ip",
			"1 for a local IP no DNS listener is bound to (the Corefile listens on the wildcard address): queries to it are not intercepted.",
			"ip"),
		Damped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "reconcile_damped_total",
			Help: "Reconcile passes delayed because another writer kept undoing our repairs (each damped pass once).",
		}),
		LivenessFailures: counterVec("liveness_failures_total",
			"/health answers that failed, by reason: reconcile or reload (a pass running too long), dns (our listener did not answer).",
			"reason"),
		ConfigPolling: gauge("config_watch_polling",
			"1 when inotify is unavailable (its limits exhausted) and the ConfigMap directories are re-read periodically instead."),
		NodeCapability: gaugeVec("node_capability",
			"1 for each kernel capability the agent relies on that the node has, 0 for one it lacks (the agent's start-up log says what each costs): owner-flag (the agent cannot start without it), socket (pods' queries are gated on the addresses the agent has bound instead of a live listener), conntrack, ipv6-rewrite (the IPv6 link-local fallback's address rewrite), ipv6 (only where an IPv6 -localip is configured).",
			"name"),
	}
	for _, t := range []string{ErrIptables, ErrIptablesLock, ErrInterfaceAdd, ErrInterfaceCheck, ErrConfigmap, ErrNftables} {
		m.SetupErrors.WithLabelValues(t)
	}
	cs := []prometheus.Collector{m.SetupErrors, m.Passes, m.PassDuration, m.Repairs, m.Reloads, m.ReloadDuration, m.ForeignDropChain, m.Ready, m.Instances, m.FailOpen, m.UnboundLocalIP, m.Damped, m.LivenessFailures, m.ConfigPolling, m.NodeCapability}
	m.RuleCounters = &RuleCounterCollector{}
	m.RuleCounters.SetSource(counters)
	cs = append(cs, m.RuleCounters)
	if err := register(reg, cs...); err != nil {
		return nil, err
	}
	var err error
	if m.Foreign, err = NewForeign(reg); err != nil {
		return nil, err
	}
	if m.Memory, err = NewMemory(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// namespace prefixes everything nodelocaldns adds; node-cache's own series keep their names.
const namespace = "nodelocaldns"

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets})
}

// register registers every collector with reg, stopping at the first error.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
