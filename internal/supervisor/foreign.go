package supervisor

import (
	"net/netip"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/foreign"
)

// Foreign tables: what outside our tables changes what happens to the DNS traffic we intercept (nft/foreign*.go).
//
//   - node-cache's own rules, left behind by a node-cache killed without teardown: their ungated notrack keeps
//     kube-proxy's DNAT from running whenever we do not serve. We remove exactly those (nft/foreign/nodecache.go), the
//     only writes we ever make outside our tables, and log each.
//   - any other notrack of our addresses' queries before conntrack: reported (log once, metric), and
//     nodelocaldns_fail_open{path="prerouting"} says 0 while one exists.
//   - drops: an nftables accept ends only its own base chain, so a drop policy or a drop or reject rule in
//     another table on the same hook wins over ours; iptables-legacy's rules are not in nftables at all. Each
//     is reported once; and where one certainly covers a local IP (foreign.Covering), the instance steps aside for
//     it (unless -foreign-drop-step-aside=false): its queries go to kube-dns, which they reach through forward.
//
// All of it runs on the passes that look at other tables (start-up, nftables events, the foreign tick), never
// on /ready or a link repair.

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

// foreignTables reads other tables and removes node-cache's leftovers ([foreign.Tables]: a short-lived socket
// of its own for each call).
type foreignTables interface {
	Scan(ours ...string) ([]foreign.Chain, error)
	RemoveNodeCacheRules(nft.Spec) ([]string, error)
}

var _ foreignTables = foreign.Tables{}

// foreignFindings is what one look at the other tables found that the node acts on.
type foreignFindings struct {
	aside   []netip.Addr // local IPs to step aside for, sorted
	notrack bool         // a foreign notrack may take our addresses' queries away from kube-proxy
}

// foreignReport keeps the foreign report: a warning the first time each finding is seen (and again only
// after it went away and came back), and the gauges. Only one goroutine at a time calls scan (start-up, then
// the reconcile runner).
type foreignReport struct {
	log       *zap.Logger
	m         *metrics.Metrics
	tables    foreignTables
	ours      func() string // our table's name, left out of the scan
	spec      nft.Spec
	stepAside bool                  // -foreign-drop-step-aside
	warned    map[string]bool       // findings already warned about, by key
	aside     map[netip.Addr]string // local IPs stepped aside for, and the drop that covers each
}

func newForeignReport(log *zap.Logger, m *metrics.Metrics, tables foreignTables, ours func() string, spec nft.Spec, stepAside bool) *foreignReport {
	return &foreignReport{log: log, m: m, tables: tables, ours: ours, spec: spec, stepAside: stepAside && !spec.NoInterception,
		warned: map[string]bool{}, aside: map[netip.Addr]string{}}
}

// removeNodeCache removes node-cache's leftover rules for our addresses and logs each.
func (f *foreignReport) removeNodeCache() {
	if f.tables == nil {
		return
	}
	removed, err := f.tables.RemoveNodeCacheRules(f.spec)
	if err != nil {
		setupError(f.m, metrics.ErrNftables)
		f.warnOnce("error nodecache "+err.Error(), "could not remove node-cache's leftover rules", zap.Error(err))
		return
	}
	f.forgetErrors("error nodecache ")
	for _, r := range removed {
		f.log.Info("removed a rule node-cache left behind", zap.String("rule", r))
	}
	f.m.Foreign.NodeCacheRulesRemoved.Add(float64(len(removed)))
}

// scan reads the other tables, refreshes the report, and returns what the node must act on; ok is false when
// they could not be read (the caller keeps what it does).
func (f *foreignReport) scan() (found foreignFindings, ok bool) {
	if f.tables == nil {
		return found, false
	}
	chains, err := f.tables.Scan(f.ours())
	if err != nil {
		setupError(f.m, metrics.ErrNftables)
		f.warnOnce("error scan "+err.Error(), "could not read other tables; the foreign report and step-aside keep their last state", zap.Error(err))
		return found, false
	}
	current := map[string]bool{}
	notracks := foreign.Notracks(chains, f.spec.LocalIPs, f.spec.DNSPort)
	f.reportDrops(chains, notracks, current)
	found.notrack = f.reportNotracks(notracks, current)
	found.aside = f.reportAside(chains, current)
	f.forgetErrors("error scan ")
	for key := range f.warned {
		if current[key] || strings.HasPrefix(key, "error ") {
			continue
		}
		delete(f.warned, key)
		if chain, ok := strings.CutPrefix(key, "policy "); ok {
			f.m.ForeignDropChain.DeleteLabelValues(chain)
		}
	}
	return found, true
}

// reportDrops says each drop policy and each chain's drop rules once, with iptables-legacy tables, and sets the
// gauges (notracks' included).
func (f *foreignReport) reportDrops(chains []foreign.Chain, notracks []foreign.Notrack, current map[string]bool) {
	rules := map[string]int{}
	for _, d := range foreign.Drops(chains, f.spec.DNSPort) {
		if d.Policy {
			key := "policy " + d.Chain
			current[key] = true
			f.warnOnce(key, "a base chain of another table drops by policy on the path of DNS traffic; our accept rules cannot override it",
				zap.String("chain", d.Chain), zap.String("hook", d.Hook))
			f.m.ForeignDropChain.WithLabelValues(d.Chain).Set(1)
		}
		if len(d.Rules) > 0 {
			key := "rules " + d.Chain + ": " + strings.Join(d.Rules, ", ")
			current[key] = true
			rules[d.Chain] = len(d.Rules)
			f.warnOnce(key, "a base chain of another table has drop or reject rules that may match DNS traffic; our accept rules cannot override them",
				zap.String("chain", d.Chain), zap.String("hook", d.Hook), zap.Strings("rules", d.Rules))
		}
	}
	legacy := foreign.LegacyTables()
	for _, t := range legacy {
		key := "legacy " + t
		current[key] = true
		f.warnOnce(key, "iptables-legacy is in use on this node; its rules see DNS traffic too and nftables cannot show them",
			zap.String("table", t))
	}
	counts := map[string]int{}
	for _, n := range notracks {
		counts[n.Chain]++
	}
	f.m.Foreign.Set(metrics.ForeignState{DropRules: rules, LegacyTables: legacy, Notracks: counts})
}

// reportNotracks says each foreign notrack of our addresses' queries once, and whether there is any.
func (f *foreignReport) reportNotracks(notracks []foreign.Notrack, current map[string]bool) bool {
	for _, n := range notracks {
		key := "notrack " + n.String()
		current[key] = true
		f.warnOnce(key, "a rule of another table notracks queries to our addresses: while no instance serves, they do not go to kube-dns (nothing fails open)",
			zap.String("rule", n.String()))
	}
	return len(notracks) > 0
}

// reportAside reports the local IPs a foreign drop covers and each change of those stepped aside for (the
// decision is [foreign.StepAside]), and returns those to step aside for (none when stepping aside is off).
func (f *foreignReport) reportAside(chains []foreign.Chain, current map[string]bool) []netip.Addr {
	covered := foreign.Covering(chains, f.spec.LocalIPs, f.spec.DNSPort)
	if !f.stepAside {
		for ip, by := range covered {
			key := "covered " + ip.String() + " " + by
			current[key] = true
			f.warnOnce(key, "a foreign drop stops DNS to this local IP while we intercept it; still intercepting (-foreign-drop-step-aside=false)",
				zap.Stringer("ip", ip), zap.String("by", by))
		}
		return nil
	}
	now, gained, lost := foreign.StepAside(f.aside, covered)
	for _, ip := range gained {
		f.log.Warn("stepping aside for a local IP: a foreign drop would stop its queries here; kube-dns answers them until it goes",
			zap.Stringer("ip", ip), zap.String("by", covered[ip]))
		f.m.Foreign.SteppedAside.WithLabelValues(ip.String()).Set(1)
		f.m.Foreign.StepAsides.WithLabelValues(ip.String()).Inc()
	}
	for _, ip := range lost {
		f.log.Info("taking a local IP back: the foreign drop that covered it is gone", zap.Stringer("ip", ip))
		f.m.Foreign.SteppedAside.DeleteLabelValues(ip.String())
	}
	f.aside = covered
	return now
}

// forgetErrors forgets the failures warned about under prefix once that step worked: a later one is said again.
func (f *foreignReport) forgetErrors(prefix string) {
	for key := range f.warned {
		if strings.HasPrefix(key, prefix) {
			delete(f.warned, key)
		}
	}
}

// warnOnce logs msg the first time key is seen, and again only after it went away and came back.
func (f *foreignReport) warnOnce(key, msg string, fields ...zap.Field) {
	if !f.warned[key] {
		f.warned[key] = true
		f.log.Warn(msg, fields...)
	}
}
