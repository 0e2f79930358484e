package supervisor

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/nodelocaldns/nodelocaldns/internal/desired"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
)

// The link-local fallback (internal/nft/fallback.go): a table no instance owns, which sends the queries to the
// local IPs that nothing takes to the kube-dns ClusterIP, so that a crash, a pod delete or a rollout without
// surge is no DNS outage for clients of the link-local address. Leaving keeps it: it is exactly what must stay
// when no instance is left, for as long as its lease.
//
// Every instance says in its own table what it wants (set fallback4: the kube-dns ClusterIP and its DNS port,
// or nothing), and every instance derives the table from what all the live instances say (nft.DecideFallback), so
// two instances never fight over it: each one's write is the other's no-op, whatever their flags.

// fallbackTable is the fallback table in the kernel ([nftconn.FallbackTable]).
type fallbackTable interface {
	Apply(*nft.Fallback) error
	InSync(*nft.Fallback) (bool, error)
	Stamp() (nft.FallbackStamp, bool, error)
	Covers(*nft.Fallback) (bool, error)
	Lease() (time.Duration, bool, error)
	Stop() (bool, error)
	Delete() (bool, error)
}

var _ fallbackTable = nftconn.FallbackTable{}

// logDisagreements says, once at start, where $KUBE_DNS_SERVICE_HOST was not taken, and what was instead.
func logDisagreements(log *zap.Logger, dis []desired.Disagreement) {
	for _, d := range dis {
		taken := "none: no link-local fallback for the family (give -kube-dns-ip)"
		if d.Taken.IsValid() {
			taken = d.Taken.String()
		}
		log.Warn("$"+desired.KubeDNSEnv+" names another kube-dns ClusterIP than the flags: the link-local fallback takes the flags' "+
			"(the variable is stale after kube-dns is recreated, or set by a Service named kube-dns in this namespace)",
			zap.Stringer("env", d.Env), zap.String("taken", taken), zap.String("from", d.From))
	}
}

// PrintFallback is what `-print-rules` shows of the fallback for the desired state st: the fallback table the
// instance would keep were it alone (nil, and why, when none). Its vote is in its table (st.NFT.Fallbacks).
func PrintFallback(st desired.State) (table *nft.Fallback, why string) {
	why = st.Fallback.Why
	for _, d := range st.Fallback.Ignored {
		why += fmt.Sprintf("; $%s=%v ignored: %s says %v", desired.KubeDNSEnv, d.Env, d.From, d.Taken)
	}
	if st.NFT.NoInterception {
		return nil, "-setupiptables=false"
	}
	self := nft.Instance{Table: "self", IPs: st.NFT.LocalIPs, Self: true, Voted: true, Fallbacks: st.NFT.Fallbacks}
	d := nft.DecideFallback([]nft.Instance{self}, st.Fallback.Lease)
	if d.Spec == nil {
		return nil, why
	}
	return nft.BuildFallback(*d.Spec), d.Why + ", " + why
}

// fallback keeps the kernel's fallback table equal to the live instances' decision.
type fallback struct {
	log     *zap.Logger
	m       *metrics.Metrics
	table   fallbackTable // nil: the agent touches no kernel state
	vote    []netip.AddrPort
	lease   time.Duration
	said    string // the last decision logged
	skipped []netip.AddrPort
	newer   int         // the generation of the newer version's table this instance stands back for (0: none), logged once
	clock   clock.Clock // what removeFallback's drain waits on
}

// newFallback prepares the fallback keeper for this instance's vote (st.NFT.Fallbacks); a vote of none says
// why, once.
func newFallback(log *zap.Logger, m *metrics.Metrics, table fallbackTable, st desired.State, clk clock.Clock) *fallback {
	vote := st.NFT.Fallbacks
	f := &fallback{log: log, m: m, table: table, vote: vote, lease: st.Fallback.Lease, clock: clk}
	logDisagreements(log, st.Fallback.Ignored)
	if table != nil && !st.NFT.NoInterception && len(vote) == 0 {
		// While it is live no instance keeps a fallback: while nothing listens, queries to the local IPs without
		// a Service behind them fail.
		log.Warn("no link-local fallback wanted", zap.String("reason", st.Fallback.Why))
	}
	m.FailOpen.WithLabelValues("link-local").Set(0)
	return f
}

// ensure makes the kernel's fallback table what the live instances ins (ours included) decide, writing it
// only when it differs or its lease is half gone. It reports what it changed ("" when nothing).
func (f *fallback) ensure(ins []nft.Instance) (string, error) {
	if f.table == nil {
		return "", nil
	}
	d := nft.DecideFallback(ins, f.lease)
	if d.Why != f.said {
		f.said = d.Why
		f.log.Info("link-local fallback decided", zap.String("decision", d.Why), zap.Int("instances", len(ins)))
	}
	covered := false
	defer func() {
		f.m.FailOpen.WithLabelValues("link-local").Set(b2f(covered))
	}()
	switch {
	case d.Leave:
		return "", nil
	case d.Spec == nil:
		had, err := removeFallback(f.table, drainDelay, f.clock)
		if err != nil {
			return "", fmt.Errorf("delete the link-local fallback: %w", err)
		}
		if !had {
			return "", nil
		}
		return "deleted the fallback table (" + d.Why + ")", nil
	}
	want := nft.BuildFallback(*d.Spec)
	if !slices.Equal(want.Skipped, f.skipped) {
		f.skipped = want.Skipped
		if len(want.Skipped) > 0 {
			f.log.Warn("no link-local fallback for these local IPs (not every live instance names a kube-dns ClusterIP of their family)",
				zap.Stringers("pairs", want.Skipped), zap.Stringers("kube-dns", d.Spec.Targets))
		}
	}
	ok, err := f.table.InSync(want)
	back := false
	if err == nil && !ok {
		back, err = f.standBack(want)
	}
	switch {
	case err != nil:
	case back:
		err = f.renewAt(want, f.lease/4)
	case !ok:
		f.newer = 0
		err = f.table.Apply(want)
	default:
		err = f.renewAt(want, f.lease/2)
	}
	if err != nil {
		return "", fmt.Errorf("link-local fallback: %w", err)
	}
	covered = len(f.vote) > 0 && len(want.Skipped) == 0
	if ok || back {
		return "", nil
	}
	return fmt.Sprintf("fallback table for %v towards %v (lease %v)", want.Covered(), d.Spec.Targets, f.lease), nil
}

// standBack reports whether the kernel's table, out of sync with want, is a later version's writing of the same
// decision (its stamp's generation is higher, its targets and covered pairs are want's): that version's rules
// stand, and this instance does not write them back to its own (fallback_stamp.go in internal/nft).
func (f *fallback) standBack(want *nft.Fallback) (bool, error) {
	stamp, found, err := f.table.Stamp()
	if err != nil || !found || !stamp.Newer() || !stamp.SameDecision(want) {
		return false, err
	}
	same, err := f.table.Covers(want)
	if err != nil || !same {
		return false, err
	}
	if f.newer != stamp.Generation {
		f.newer = stamp.Generation
		f.log.Info("a later version's link-local fallback table is in place, for the same decision: left to it",
			zap.Stringer("stamp", stamp), zap.Stringer("ours", want.Stamp))
	}
	return true, nil
}

// renewAt writes the table again (ours: want) once less than threshold is left of the lease on some pair:
// every pair then starts a new lease. In sync, at half of this instance's lease. Instances of other
// -fallback-lease values do not fight over it (the content does not name the lease): the one with the longer
// lease renews more often, the other finds enough left. Standing back for a later version's table, at a
// quarter: while that version runs it renews at half, first; once it is gone (a rollback), this one takes the
// table back before the lease runs out. A renewal is no repair; it is logged at debug level only.
func (f *fallback) renewAt(want *nft.Fallback, threshold time.Duration) error {
	left, any, err := f.table.Lease()
	if err != nil || !any || left >= threshold {
		return err
	}
	if err := f.table.Apply(want); err != nil {
		return err
	}
	f.log.Debug("renewed the link-local fallback's lease", zap.Duration("left", left), zap.Duration("lease", f.lease))
	return nil
}

// removeFallback takes the fallback table away without losing the queries it redirected last: first no new
// query is redirected, then those in flight get drain to be answered (IPVS's replies still need their address
// back), then the table goes. It reports whether there was one.
func removeFallback(t fallbackTable, drain time.Duration, clk clock.Clock) (bool, error) {
	had, err := t.Stop()
	if err != nil || !had {
		return had, err
	}
	clk.Sleep(drain)
	return t.Delete()
}
