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

// checkForeign refreshes the foreign-drop report: warnings (once per finding while it lasts) and gauges.
func (s *Supervisor) checkForeign() {
	if s.table == nil {
		return
	}
	drops, err := s.table.ForeignDrops(s.table.Table())
	if err != nil {
		s.log.Debug("list foreign drops", zap.Error(err))
		return
	}
	current := map[string]bool{}
	rules := map[string]int{}
	for _, d := range drops {
		if d.Policy {
			key := "policy " + d.Chain
			current[key] = true
			s.warnOnce(key, "a base chain of another table drops by policy on the path of DNS traffic; our accept rules cannot override it",
				zap.String("chain", d.Chain), zap.String("hook", d.Hook))
			withMetrics(s.m, func(m *metrics.Metrics) { m.ForeignDropChain.WithLabelValues(d.Chain).Set(1) })
		}
		if len(d.Rules) > 0 {
			key := "rules " + d.Chain + ": " + strings.Join(d.Rules, ", ")
			current[key] = true
			rules[d.Chain] = len(d.Rules)
			s.warnOnce(key, "a base chain of another table has drop or reject rules that may match DNS traffic; our accept rules cannot override them",
				zap.String("chain", d.Chain), zap.String("hook", d.Hook), zap.Strings("rules", d.Rules))
		}
	}
	legacy := nft.LegacyTables()
	for _, t := range legacy {
		key := "legacy " + t
		current[key] = true
		s.warnOnce(key, "iptables-legacy is in use on this node; its rules see DNS traffic too and nftables cannot show them",
			zap.String("table", t))
	}
	s.warnedDrop.Range(func(k, _ any) bool {
		key := k.(string)
		if current[key] {
			return true
		}
		s.warnedDrop.Delete(key)
		if chain, ok := strings.CutPrefix(key, "policy "); ok {
			withMetrics(s.m, func(m *metrics.Metrics) { m.ForeignDropChain.DeleteLabelValues(chain) })
		}
		return true
	})
	withMetrics(s.m, func(m *metrics.Metrics) {
		m.Foreign.Set(metrics.ForeignState{DropRules: rules, LegacyTables: legacy})
	})
}

// warnOnce logs msg the first time key is seen, and again only after it went away and came back.
func (s *Supervisor) warnOnce(key, msg string, fields ...zap.Field) {
	if _, seen := s.warnedDrop.LoadOrStore(key, true); !seen {
		s.log.Warn(msg, fields...)
	}
}
