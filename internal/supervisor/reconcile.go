package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	resultStandby  = "standby"
)

// pass recomputes nothing but compares: the desired state is fixed by the flags, so each pass reads the kernel,
// and writes only what differs. Only the leader writes.
func (s *Supervisor) pass(_ context.Context, reasons []string) error {
	start := time.Now()
	if !s.leader.Load() {
		s.countPass(reasons, resultStandby, start)
		return nil
	}
	var repaired []string
	var errs []error
	// The table first: it is what steers the ClusterIP's traffic, and what most events are about.
	if s.table != nil {
		drift, err := s.table.Check(s.ruleset)
		if err != nil {
			s.setupError(metrics.ErrNftables)
			errs = append(errs, fmt.Errorf("check nftables table: %w", err))
		}
		if err != nil || len(drift) > 0 {
			s.log.Debug("applying nftables ruleset", zap.String("ruleset", s.ruleset.String()))
			if err := s.table.Apply(s.ruleset); err != nil {
				s.setupError(metrics.ErrNftables)
				errs = append(errs, fmt.Errorf("apply nftables table: %w", err))
			} else {
				for _, d := range drift {
					s.repair(string(d.Kind), 1)
					repaired = append(repaired, d.String())
				}
			}
		}
	}
	if s.links != nil {
		changes, err := s.links.Ensure(s.linkSpec)
		if err != nil {
			s.setupError(metrics.ErrInterfaceAdd)
			errs = append(errs, fmt.Errorf("ensure interface %q: %w", s.linkSpec.Name, err))
		}
		if len(changes) > 0 {
			s.repair("interface", len(changes))
			repaired = append(repaired, changes...)
		}
	}
	if s.table != nil {
		s.checkForeignDrop()
	}
	err := errors.Join(errs...)
	s.lastPass.Store(&err)
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
	return err
}

// ensureLink creates the interface at start-up; the listeners cannot bind before it exists.
func (s *Supervisor) ensureLink() error {
	if s.links == nil {
		return nil
	}
	changes, err := s.links.Ensure(s.linkSpec)
	if err != nil {
		s.setupError(metrics.ErrInterfaceAdd)
		return fmt.Errorf("ensure interface %q: %w", s.linkSpec.Name, err)
	}
	s.log.Info("interface ready", zap.String("interface", s.linkSpec.Name), zap.String("kind", s.links.Kind()), zap.Strings("changes", changes))
	return nil
}

// waitForLink lets a successor start serving once the leader's interface carries the listen addresses.
func (s *Supervisor) waitForLink(ctx context.Context) error {
	if s.links == nil {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		diff, err := s.links.Check(s.linkSpec)
		if err == nil && len(diff) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("interface %q not ready under the current leader: %v %v", s.linkSpec.Name, diff, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkKernel compares without writing: a successor's readiness.
func (s *Supervisor) checkKernel() error {
	if s.links != nil {
		if diff, err := s.links.Check(s.linkSpec); err != nil || len(diff) > 0 {
			return fmt.Errorf("interface %q: %v %v", s.linkSpec.Name, diff, err)
		}
	}
	if s.table != nil {
		if drift, err := s.table.Check(s.ruleset); err != nil || len(drift) > 0 {
			return fmt.Errorf("nftables table: %v %v", drift, err)
		}
	}
	return nil
}

// startWatchers turns kernel notifications into reconcile triggers. Each watcher resubscribes after an overrun
// and reports it as a trigger, so a lost event always costs one full pass, never a missed repair.
func (s *Supervisor) startWatchers(ctx context.Context, wg *sync.WaitGroup) {
	if s.table != nil {
		wg.Go(func() {
			err := nft.Watch(ctx, s.log, func(reason string) { s.runner.Trigger("nft:" + reason) }, nft.IgnoreConn(s.table))
			if err != nil && ctx.Err() == nil {
				s.log.Error("nftables watch stopped; relying on the periodic pass", zap.Error(err))
			}
		})
	}
	if s.links != nil {
		wg.Go(func() {
			err := link.Watch(ctx, s.log, s.linkSpec.Name, func(reason string) { s.runner.Trigger("link:" + reason) })
			if err != nil && ctx.Err() == nil {
				s.log.Error("link watch stopped; relying on the periodic pass", zap.Error(err))
			}
		})
	}
}

// checkForeignDrop warns once per chain of another table that drops what our accept rules let through.
func (s *Supervisor) checkForeignDrop() {
	chains, err := s.table.ForeignDropPolicies()
	if err != nil {
		s.log.Debug("list foreign drop policies", zap.Error(err))
		return
	}
	current := map[string]bool{}
	for _, c := range chains {
		current[c] = true
		if _, seen := s.warnedDrop.LoadOrStore(c, true); !seen {
			s.log.Warn("a base chain of another table drops by policy on the path of DNS traffic; our accept rules cannot override it",
				zap.String("chain", c))
		}
		s.setGauge(func(m *metrics.Metrics) { m.ForeignDropChain.WithLabelValues(c).Set(1) })
	}
	s.warnedDrop.Range(func(k, _ any) bool {
		if c := k.(string); !current[c] {
			s.warnedDrop.Delete(c)
			s.setGauge(func(m *metrics.Metrics) { m.ForeignDropChain.DeleteLabelValues(c) })
		}
		return true
	})
}

// countPass counts a pass once under each kind of trigger that asked for it. "nft:delete table ..." and
// "nft:overrun" are both kind "nft"; a pass that coalesced five link notifications is one link pass, not five.
// Only a pass asked for by several kinds (nft and link) counts under each; the duration histogram's count is
// the number of passes.
func (s *Supervisor) countPass(reasons []string, result string, start time.Time) {
	s.setGauge(func(m *metrics.Metrics) {
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
	s.setGauge(func(m *metrics.Metrics) { m.Repairs.WithLabelValues(object).Add(float64(n)) })
}

func (s *Supervisor) setupError(kind string) {
	s.setGauge(func(m *metrics.Metrics) { m.SetupErrors.WithLabelValues(kind).Inc() })
}
