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

	mu                sync.Mutex
	lastRules, legacy map[string]bool
}

// ForeignState is one run of the foreign-drop check.
type ForeignState struct {
	// DropRules is, per base chain of another table on prerouting, input or output ("ip filter/INPUT"), the
	// number of its own drop and reject rules that may match DNS traffic.
	DropRules map[string]int
	// LegacyTables are the iptables-legacy tables that exist in the namespace ("ip filter").
	LegacyTables []string
}

// NewForeign creates the foreign-drop gauges and registers them with reg.
func NewForeign(reg prometheus.Registerer) (*Foreign, error) {
	f := &Foreign{
		DropRules: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "foreign_drop_rules",
			Help: "Drop and reject rules that may match DNS traffic, per base chain of another table hooked on prerouting, input or output; a drop there wins over our accept rules.",
		}, []string{"chain"}),
		LegacyTables: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nodelocaldns", Name: "iptables_legacy_table",
			Help: "1 for each iptables-legacy table in use in the node's network namespace; its rules see DNS traffic too and are invisible to nftables.",
		}, []string{"table"}),
		lastRules: map[string]bool{}, legacy: map[string]bool{},
	}
	for _, c := range []prometheus.Collector{f.DropRules, f.LegacyTables} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Set makes the gauges say s: series that s no longer names are deleted, so a scrape never sees a gap.
func (f *Foreign) Set(s ForeignState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := map[string]bool{}
	for chain, n := range s.DropRules {
		if n > 0 {
			f.DropRules.WithLabelValues(chain).Set(float64(n))
			now[chain] = true
		}
	}
	for chain := range f.lastRules {
		if !now[chain] {
			f.DropRules.DeleteLabelValues(chain)
		}
	}
	f.lastRules = now
	legacy := map[string]bool{}
	for _, t := range s.LegacyTables {
		f.LegacyTables.WithLabelValues(t).Set(1)
		legacy[t] = true
	}
	for t := range f.legacy {
		if !legacy[t] {
			f.LegacyTables.DeleteLabelValues(t)
		}
	}
	f.legacy = legacy
}
