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

	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Pass results, as counted in nodelocaldns_reconcile_passes_total.
const (
	resultInSync   = "in_sync"
	resultRepaired = "repaired"
	resultError    = "error"
)

// pass makes the interface carry what the live instances need (node.ensureLink) and looks for foreign drop
// policies. Our table needs no pass: it is owned, nobody else can change it. Other instances' tables coming
// and going change the union, so their notifications trigger passes too.
func (s *Supervisor) pass(_ context.Context, reasons []string) (changed bool, err error) {
	start := time.Now()
	var repaired []string
	var errs []error
	changes, err := s.node.ensureLink()
	if err != nil {
		s.setupError(metrics.ErrInterfaceAdd)
		errs = append(errs, fmt.Errorf("ensure interface %q: %w", s.opts.InterfaceName, err))
	}
	if len(changes) > 0 {
		s.repair("interface", len(changes))
		repaired = append(repaired, changes...)
	}
	if lookAtForeignTables(reasons) {
		s.checkForeign()
	}
	err = errors.Join(errs...)
	s.lastPass.store(err)
	switch {
	case err != nil:
		s.countPass(reasons, resultError, start)
		s.log.Error("reconcile pass failed", zap.Strings("triggers", reasons), zap.Error(err), zap.Duration("elapsed", time.Since(start)))
	case len(repaired) > 0:
		s.countPass(reasons, resultRepaired, start)
		s.log.Info("reconciled", zap.Strings("triggers", reasons), zap.Strings("repaired", repaired), zap.Duration("elapsed", time.Since(start)))
	default:
		s.countPass(reasons, resultInSync, start)
		s.log.Debug("in sync", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	}
	return len(repaired) > 0, err
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

// startWatchers turns kernel notifications into reconcile triggers. Each watcher resubscribes after an overrun
// and reports it as a trigger, so a lost event always costs one full pass, never a missed repair.
func (s *Supervisor) startWatchers(ctx context.Context, wg *sync.WaitGroup) {
	// Our table cannot be tampered with; the nftables watch only tells us of other tables changing (other
	// instances registering or leaving, foreign drop policies).
	if s.table != nil {
		wg.Go(func() {
			err := nft.Watch(ctx, s.log, func(reason string) { s.runner.trigger("nft:" + reason) },
				nft.IgnoreConn(s.table), nft.WatchTables(s.table.Table()))
			if err != nil && ctx.Err() == nil {
				s.log.Error("nftables watch stopped; relying on the periodic pass", zap.Error(err))
			}
		})
	}
	if s.table != nil {
		// A drop rule added to an existing foreign base chain is filtered out with every other foreign rule
		// event (nft/watchbpf.go), so the foreign report is also refreshed on this slow tick.
		wg.Go(func() {
			t := time.NewTicker(foreignRecheck)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s.runner.trigger(reasonForeign)
				}
			}
		})
	}
	if s.links != nil {
		wg.Go(func() {
			err := link.Watch(ctx, s.log, s.opts.InterfaceName, func(reason string) { s.runner.trigger("link:" + reason) })
			if err != nil && ctx.Err() == nil {
				s.log.Error("link watch stopped; relying on the periodic pass", zap.Error(err))
			}
		})
	}
}

// countPass counts a pass once under each kind of trigger that asked for it. "nft:delete table ..." and
// "nft:overrun" are both kind "nft"; a pass that coalesced five link notifications is one link pass, not five.
// Only a pass asked for by several kinds (nft and link) counts under each; the duration histogram's count is
// the number of passes.
func (s *Supervisor) countPass(reasons []string, result string, start time.Time) {
	withMetrics(s.m, func(m *metrics.Metrics) {
		m.PassDuration.Observe(time.Since(start).Seconds())
		for _, trigger := range triggerKinds(reasons) {
			m.Passes.WithLabelValues(trigger, result).Inc()
		}
	})
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

func (s *Supervisor) repair(object string, n int) {
	withMetrics(s.m, func(m *metrics.Metrics) { m.Repairs.WithLabelValues(object).Add(float64(n)) })
}

func (s *Supervisor) setupError(kind string) {
	withMetrics(s.m, func(m *metrics.Metrics) { m.SetupErrors.WithLabelValues(kind).Inc() })
}

// ruleCounters reads our table's rule counters for a scrape.
func (s *Supervisor) ruleCounters() ([]metrics.RuleCounter, error) {
	rcs, err := s.table.TableCounters(s.table.Table(), nft.OurChains()...)
	if err != nil {
		return nil, err
	}
	out := make([]metrics.RuleCounter, len(rcs))
	for i, rc := range rcs {
		out[i] = metrics.RuleCounter{Chain: rc.Chain, Comment: rc.Comment, Packets: rc.Packets, Bytes: rc.Bytes}
	}
	return out, nil
}
