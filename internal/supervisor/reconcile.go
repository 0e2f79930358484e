package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftwatch"
	"github.com/nodelocaldns/nodelocaldns/internal/runner"
)

// Pass results, as counted in nodelocaldns_reconcile_passes_total.
const (
	resultInSync   = "in_sync"
	resultRepaired = "repaired"
	resultError    = "error"
)

// reasonSubscribed is the trigger of the pass taken once the nftables watch has subscribed (kind nft).
const reasonSubscribed = "nft:subscribed"

// reconciler keeps the interface carrying what the live instances need, and the foreign-drop report fresh:
// one pass per batch of triggers (internal/runner), each recomputing everything.
type reconciler struct {
	log      *zap.Logger
	m        *metrics.Metrics
	ifname   string
	node     *instance.Node
	fallback *fallback
	foreign  *foreignReport
	runner   *runner.Runner
	// lastPass is the result of the last pass; /ready reads it.
	lastPass atomicErr
}

func newReconciler(log *zap.Logger, m *metrics.Metrics, ifname string, syncInterval time.Duration, n *instance.Node, fb *fallback, foreign *foreignReport) *reconciler {
	r := &reconciler{log: log, m: m, ifname: ifname, node: n, fallback: fb, foreign: foreign}
	r.runner = runner.New(runner.Config{MinInterval: minPassInterval, MaxInterval: syncInterval, Damp: newDamping(log, m)}, r.pass)
	return r
}

// pass makes the interface carry what the live instances need, keeps the link-local fallback covering the
// same addresses, and looks for foreign drop policies. Our table needs no pass: it is owned, nobody else can
// change it; the fallback table is not (anybody may flush it), so its changes trigger passes. Other
// instances' tables coming and going change the union, so their notifications trigger passes too.
func (r *reconciler) pass(_ context.Context, reasons []string) (changed bool, err error) {
	start := time.Now()
	var repaired []string
	var errs []error
	repaired, errs = r.ensure(repaired, errs)
	if lookAtForeignTables(reasons) {
		if err := r.lookAtForeign(); err != nil {
			setupError(r.m, metrics.ErrNftables)
			errs = append(errs, err)
		}
	}
	err = errors.Join(errs...)
	r.lastPass.store(err)
	switch {
	case err != nil:
		r.countPass(reasons, resultError, start)
		r.log.Error("reconcile pass failed", zap.Strings("triggers", reasons), zap.Error(err), zap.Duration("elapsed", time.Since(start)))
	case len(repaired) > 0:
		r.countPass(reasons, resultRepaired, start)
		r.log.Info("reconciled", zap.Strings("triggers", reasons), zap.Strings("repaired", repaired), zap.Duration("elapsed", time.Since(start)))
	default:
		r.countPass(reasons, resultInSync, start)
		r.log.Debug("in sync", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	}
	return len(repaired) > 0, err
}

// removeNodeCache deletes node-cache's leftover rules, which blackhole pods' ClusterIP queries whenever we do
// not serve.
func (r *reconciler) removeNodeCache() { r.foreign.removeNodeCache() }

// lookAtForeign removes node-cache's rules again (a node-cache still running puts them back) and scans the
// foreign tables, handing the node what it found: the drops it steps aside for. The error is the node's.
func (r *reconciler) lookAtForeign() error {
	r.removeNodeCache()
	if found, ok := r.foreign.scan(); ok {
		return r.node.ForeignFound(found.notrack, found.aside)
	}
	return nil
}

// ensureFallback puts the link-local fallback table in place for ins' addresses; change says what it changed.
func (r *reconciler) ensureFallback(ins []nft.Instance) (change string, err error) {
	return r.fallback.ensure(ins)
}

// ensure does the pass's repairs: the interface, then the fallback table, both for the union of the live
// instances' addresses (one look at the instance tables for both).
func (r *reconciler) ensure(repaired []string, errs []error) ([]string, []error) {
	ips, ins, err := r.node.Addresses()
	if err != nil {
		return repaired, append(errs, fmt.Errorf("list instance tables: %w", err))
	}
	changes, err := r.node.Carry(ips)
	if err != nil {
		setupError(r.m, metrics.ErrInterfaceAdd)
		errs = append(errs, fmt.Errorf("ensure interface %q: %w", r.ifname, err))
	}
	if len(changes) > 0 {
		r.repair("interface", len(changes))
		repaired = append(repaired, changes...)
	}
	change, err := r.ensureFallback(ins)
	if err != nil {
		setupError(r.m, metrics.ErrNftables)
		errs = append(errs, err)
	}
	if change != "" {
		r.repair("fallback", 1)
		repaired = append(repaired, change)
	}
	return repaired, errs
}

// atomicErr holds an error, nil included.
type atomicErr struct{ p atomic.Pointer[error] }

func (a *atomicErr) store(err error) { a.p.Store(&err) }

// load returns the stored error; before any store, that no pass has run yet.
func (a *atomicErr) load() error {
	if p := a.p.Load(); p != nil {
		return *p
	}
	return errors.New("no reconcile pass yet")
}

// start runs the reconcile runner and the watchers that turn kernel notifications into its triggers until ctx
// is done. Each watcher resubscribes after an overrun and reports it as a trigger, so a lost event always costs
// one full pass, never a missed repair.
func (r *reconciler) start(ctx context.Context, wg *sync.WaitGroup, k *kernel) {
	r.startWatchers(ctx, wg, k)
	wg.Go(func() { r.runner.Run(ctx) })
}

func (r *reconciler) startWatchers(ctx context.Context, wg *sync.WaitGroup, k *kernel) {
	// Our table cannot be tampered with; the nftables watch tells us of other tables changing (other
	// instances registering or leaving, foreign drop policies) and of any change to the fallback table. A
	// change made after the start-up's passes and before the watch joined the group sends no notification
	// we can read: one pass once subscribed sees it (a resubscription after an overrun asks for one anyway).
	if k.conn != nil {
		wg.Go(func() {
			err := nftwatch.Watch(ctx, r.log, func(reason string) { r.runner.Trigger("nft:" + reason) },
				nftwatch.IgnoreConn(k.conn), nftwatch.Tables(k.conn.Table(), nft.FallbackTableName),
				nftwatch.OnSubscribed(func() { r.runner.Trigger(reasonSubscribed) }))
			if err != nil && ctx.Err() == nil {
				r.log.Error("nftables watch stopped; relying on the periodic pass", zap.Error(err))
			}
		})
	}
	if k.conn != nil {
		// A drop rule added to an existing foreign base chain is filtered out with every other foreign rule
		// event (nft/nftwatch/bpf.go), so the foreign report is also refreshed on this slow tick.
		wg.Go(func() { r.recheckForeign(ctx) })
	}
	if k.links != nil {
		wg.Go(func() {
			err := link.Watch(ctx, r.log, r.ifname, func(reason string) { r.runner.Trigger("link:" + reason) })
			if err != nil && ctx.Err() == nil {
				r.log.Error("link watch stopped; relying on the periodic pass", zap.Error(err))
			}
		})
	}
}

// recheckForeign asks for a pass every foreignRecheck, on the runner's clock, until ctx is done: a drop rule
// added to an existing foreign base chain is filtered out with every other foreign rule event
// (nft/nftwatch/bpf.go), so the foreign report is also refreshed on this slow tick, whatever -syncinterval says.
func (r *reconciler) recheckForeign(ctx context.Context) {
	tick := r.runner.Clock().Tick(foreignRecheck) // collected once this returns (Go 1.23's time.Tick)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			r.runner.Trigger(reasonForeign)
		}
	}
}

// countPass counts a pass once under each kind of trigger that asked for it. "nft:delete table ..." and
// "nft:overrun" are both kind "nft"; a pass that coalesced five link notifications is one link pass, not five.
// Only a pass asked for by several kinds (nft and link) counts under each; the duration histogram's count is
// the number of passes.
func (r *reconciler) countPass(reasons []string, result string, start time.Time) {
	r.m.PassDuration.Observe(time.Since(start).Seconds())
	for _, trigger := range triggerKinds(reasons) {
		r.m.Passes.WithLabelValues(trigger, result).Inc()
	}
}

// triggerKinds returns the distinct kinds (the part before ':') of reasons, sorted.
func triggerKinds(reasons []string) []string {
	kinds := make([]string, 0, len(reasons))
	for _, r := range reasons {
		kind, _, _ := strings.Cut(r, ":")
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	return slices.Compact(kinds)
}

func (r *reconciler) repair(object string, n int) {
	r.m.Repairs.WithLabelValues(object).Add(float64(n))
}

func setupError(m *metrics.Metrics, kind string) {
	m.SetupErrors.WithLabelValues(kind).Inc()
}
