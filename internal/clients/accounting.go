package clients

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// window is how often the drain closes the rate window (and looks for clients to log): `-top` refreshes at
// the same pace.
const window = time.Second

// Accounting is the agent's per-client accounting: its writers' shards, the table, and the drain (Run).
type Accounting struct {
	log   *zap.Logger
	now   func() time.Time
	wakeC chan struct{} // a ring is half full, or a shard was released: drain now

	shardsMu sync.Mutex
	shards   []*Shard

	chainMu sync.Mutex // the handler's writers share one shard
	chain   *Shard

	mu         sync.Mutex // the table, and the drain itself
	t          *table
	rolled     time.Time // when the current window began
	alerts     alerts
	publishers []func(Snapshot) // called after each window with the top clients (the metrics' gauge set)
	namer      func(netip.Addr) string
}

// SetNamer makes snapshots, metrics and log lines name each client by namer (internal/podwatch: "namespace/pod"),
// besides its address. Call it before Run.
func (a *Accounting) SetNamer(namer func(netip.Addr) string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.namer = namer
	a.t.namer = namer
}

// New returns an Accounting counting nothing until its writers write; Run drains it.
func New(log *zap.Logger) *Accounting { return newAccounting(log, time.Now) }

func newAccounting(log *zap.Logger, now func() time.Time) *Accounting {
	a := &Accounting{log: log, now: now, wakeC: make(chan struct{}, 1), t: newTable(MaxClients, now), rolled: now()}
	a.alerts = newAlerts(log)
	a.chain = a.NewShard()
	return a
}

// NewShard returns a ring for one writer (a fast path reader), counted until Release.
func (a *Accounting) NewShard() *Shard {
	s := &Shard{acct: a}
	s.room = ringSize
	a.shardsMu.Lock()
	a.shards = append(a.shards, s)
	a.shardsMu.Unlock()
	return s
}

// Answer records one answer CoreDNS's chain gave (the handler): to from, for name, with rcode, from the
// cache or not, after took.
func (a *Accounting) Answer(from netip.AddrPort, name string, rcode int, hit bool, took time.Duration) {
	a.chainMu.Lock()
	a.chain.add(from.Addr().As16(), name, uint8(rcode), hit, micros(took))
	a.chain.Publish()
	a.chainMu.Unlock()
}

func (a *Accounting) wake() {
	select {
	case a.wakeC <- struct{}{}:
	default:
	}
}

// Run drains the rings until ctx ends: when one is half full, and every window, when it also closes the rate
// window and logs the clients that crossed a threshold.
func (a *Accounting) Run(ctx context.Context) {
	tick := time.NewTicker(window)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wakeC:
			a.mu.Lock()
			a.drain()
			a.mu.Unlock()
		case <-tick.C:
			a.closeWindow()
		}
	}
}

// closeWindow drains, rolls the rates over the time since the last window, logs and publishes.
func (a *Accounting) closeWindow() {
	a.mu.Lock()
	a.drain()
	now := a.now()
	a.t.roll(now.Sub(a.rolled))
	a.t.renameAll()
	a.rolled = now
	a.alerts.check(now, a.t, a.namer)
	snap := a.snapshot(publishTop)
	pubs := a.publishers
	a.mu.Unlock()
	for _, p := range pubs {
		p(snap)
	}
}

// drain moves every shard's published answers into the table and forgets released shards; a.mu held.
func (a *Accounting) drain() {
	a.shardsMu.Lock()
	shards := slices.Clone(a.shards)
	a.shardsMu.Unlock()
	var gone []*Shard
	for _, s := range shards {
		released := s.released.Load() // before the drain: what a released writer published is all there is
		s.drain(a.t)
		if released {
			gone = append(gone, s)
		}
	}
	if len(gone) > 0 {
		a.shardsMu.Lock()
		a.shards = slices.DeleteFunc(a.shards, func(s *Shard) bool { return slices.Contains(gone, s) })
		a.shardsMu.Unlock()
	}
}

// OnWindow adds f to what is called after each window with the top publishTop clients (the metrics' gauge
// set). Call it before Run.
func (a *Accounting) OnWindow(f func(Snapshot)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.publishers = append(a.publishers, f)
}
