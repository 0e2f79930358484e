package supervisor

import (
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Foreign drops: what outside our table may drop the DNS traffic we intercept (nft/foreign.go). An nftables
// accept ends only its own base chain, so a drop policy or a drop or reject rule in another table on the same
// hook wins over ours; iptables-legacy's rules are not in nftables at all. We never write into other tables: we
// find them, warn once per finding, and export them.

const (
	// foreignRecheck is how often the foreign report is refreshed without an event.
	foreignRecheck = time.Minute
	// reasonForeign is the trigger of that refresh.
	reasonForeign = "foreign"
)

// lookAtForeignTables says whether a pass asked for by reasons reads other tables: passes caused by nftables
// events, the periodic and foreign ticks, start-up and retries do; a pass that only repairs our interface after
// a link event does not, so a repair never costs more because the node's ruleset is large.
func lookAtForeignTables(reasons []string) bool {
	for _, r := range reasons {
		if kind, _, _ := strings.Cut(r, ":"); kind != "link" {
			return true
		}
	}
	return false
}

// dropLister lists what in other tables may drop our traffic, and names our own table ([*nft.Conn]).
type dropLister interface {
	ForeignDrops(ours ...string) ([]nft.ForeignDrop, error)
	Table() string
}

var _ dropLister = (*nft.Conn)(nil)

// foreignReport keeps the foreign-drop report: a warning the first time each finding is seen (and again only
// after it went away and came back), and the gauges. Only the reconcile runner's goroutine calls check.
type foreignReport struct {
	log    *zap.Logger
	m      *metrics.Metrics
	drops  dropLister
	warned map[string]bool // findings already warned about, by key
}

func newForeignReport(log *zap.Logger, m *metrics.Metrics, drops dropLister) *foreignReport {
	return &foreignReport{log: log, m: m, drops: drops, warned: map[string]bool{}}
}

// check refreshes the report.
func (f *foreignReport) check() {
	if f.drops == nil {
		return
	}
	drops, err := f.drops.ForeignDrops(f.drops.Table())
	if err != nil {
		f.log.Debug("list foreign drops", zap.Error(err))
		return
	}
	current := map[string]bool{}
	rules := map[string]int{}
	for _, d := range drops {
		if d.Policy {
			key := "policy " + d.Chain
			current[key] = true
			f.warnOnce(key, "a base chain of another table drops by policy on the path of DNS traffic; our accept rules cannot override it",
				zap.String("chain", d.Chain), zap.String("hook", d.Hook))
			withMetrics(f.m, func(m *metrics.Metrics) { m.ForeignDropChain.WithLabelValues(d.Chain).Set(1) })
		}
		if len(d.Rules) > 0 {
			key := "rules " + d.Chain + ": " + strings.Join(d.Rules, ", ")
			current[key] = true
			rules[d.Chain] = len(d.Rules)
			f.warnOnce(key, "a base chain of another table has drop or reject rules that may match DNS traffic; our accept rules cannot override them",
				zap.String("chain", d.Chain), zap.String("hook", d.Hook), zap.Strings("rules", d.Rules))
		}
	}
	legacy := nft.LegacyTables()
	for _, t := range legacy {
		key := "legacy " + t
		current[key] = true
		f.warnOnce(key, "iptables-legacy is in use on this node; its rules see DNS traffic too and nftables cannot show them",
			zap.String("table", t))
	}
	for key := range f.warned {
		if current[key] {
			continue
		}
		delete(f.warned, key)
		if chain, ok := strings.CutPrefix(key, "policy "); ok {
			withMetrics(f.m, func(m *metrics.Metrics) { m.ForeignDropChain.DeleteLabelValues(chain) })
		}
	}
	withMetrics(f.m, func(m *metrics.Metrics) {
		m.Foreign.Set(metrics.ForeignState{DropRules: rules, LegacyTables: legacy})
	})
}

// warnOnce logs msg the first time key is seen, and again only after it went away and came back.
func (f *foreignReport) warnOnce(key, msg string, fields ...zap.Field) {
	if !f.warned[key] {
		f.warned[key] = true
		f.log.Warn(msg, fields...)
	}
}
