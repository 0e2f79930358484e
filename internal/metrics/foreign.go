package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Foreign holds the gauges of the foreign-drop check beyond drop policies (which Metrics.ForeignDropChain
// reports): drop and reject rules in other tables' base chains on the DNS path, and iptables-legacy tables in
// the node's namespace.
type Foreign struct {
	DropRules    *prometheus.GaugeVec // chain
	LegacyTables *prometheus.GaugeVec // table
	// Notracks counts, per base chain of another table, the notrack rules that may match queries to the
	// local IPs: while one exists, nothing fails open (fail_open{path="prerouting"} says 0).
	Notracks *prometheus.GaugeVec // chain
	// NodeCacheRulesRemoved counts node-cache's leftover iptables rules removed.
	NodeCacheRulesRemoved prometheus.Counter
	// SteppedAside is 1 for each local IP the instance does not intercept because a foreign drop covers it;
	// StepAsides counts the times it stepped aside for one.
	SteppedAside *prometheus.GaugeVec   // ip
	StepAsides   *prometheus.CounterVec // ip

	mu                          sync.Mutex
	lastRules, legacy, notracks map[string]bool
}

// ForeignState is one run of the foreign-drop check.
type ForeignState struct {
	// DropRules is, per base chain of another table on prerouting, input or output ("ip filter/INPUT"), the
	// number of its own drop and reject rules that may match DNS traffic.
	DropRules map[string]int
	// LegacyTables are the iptables-legacy tables that exist in the namespace ("ip filter").
	LegacyTables []string
	// Notracks is, per base chain of another table, the number of its notrack rules that may match queries
	// to the local IPs.
	Notracks map[string]int
}

// NewForeign creates the foreign-drop gauges and registers them with reg.
func NewForeign(reg prometheus.Registerer) (*Foreign, error) {
	f := &Foreign{
		DropRules: gaugeVec("foreign_drop_rules",
			"Drop and reject rules that may match DNS traffic, per base chain of another table hooked on prerouting, input or output; a drop there wins over our accept rules.",
			"chain"),
		LegacyTables: gaugeVec("iptables_legacy_table",
			"1 for each iptables-legacy table in use in the node's network namespace; its rules see DNS traffic too and are invisible to nftables.",
			"table"),
		Notracks: gaugeVec("foreign_notrack_rules",
			"Notrack rules of another table, per base chain before conntrack, that may match queries to the local IPs: they keep kube-proxy's DNAT from taking those queries to kube-dns while no instance serves.",
			"chain"),
		NodeCacheRulesRemoved: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "nodecache_rules_removed_total",
			Help: "node-cache's own iptables rules for the local IPs (left behind by a node-cache killed without teardown) removed."}),
		SteppedAside: gaugeVec("stepped_aside",
			"1 for a local IP this instance does not intercept because another table's drop on input or output covers it: its queries go to kube-dns.",
			"ip"),
		StepAsides: counterVec("step_asides_total", "Times this instance stepped aside for a local IP covered by another table's drop.", "ip"),
		lastRules:  map[string]bool{}, legacy: map[string]bool{}, notracks: map[string]bool{},
	}
	if err := register(reg, f.DropRules, f.LegacyTables, f.Notracks, f.NodeCacheRulesRemoved, f.SteppedAside, f.StepAsides); err != nil {
		return nil, err
	}
	return f, nil
}

// Set makes the gauges say s: series that s no longer names are deleted, so a scrape never sees a gap.
func (f *Foreign) Set(s ForeignState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules := map[string]float64{}
	for chain, n := range s.DropRules {
		if n > 0 {
			rules[chain] = float64(n)
		}
	}
	f.lastRules = setSeries(f.DropRules, f.lastRules, rules)
	legacy := map[string]float64{}
	for _, t := range s.LegacyTables {
		legacy[t] = 1
	}
	f.legacy = setSeries(f.LegacyTables, f.legacy, legacy)
	notracks := map[string]float64{}
	for chain, n := range s.Notracks {
		if n > 0 {
			notracks[chain] = float64(n)
		}
	}
	f.notracks = setSeries(f.Notracks, f.notracks, notracks)
}

// setSeries sets one series of g per label value in now and deletes those of last that now lacks; it returns
// the label values it set, the next call's last.
func setSeries(g *prometheus.GaugeVec, last map[string]bool, now map[string]float64) map[string]bool {
	set := make(map[string]bool, len(now))
	for label, v := range now {
		g.WithLabelValues(label).Set(v)
		set[label] = true
	}
	for label := range last {
		if !set[label] {
			g.DeleteLabelValues(label)
		}
	}
	return set
}
