package connlimit

import (
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Pass intervals: idle, and while passes find connections to close.
const (
	idleEvery = 100 * time.Millisecond
	busyEvery = 20 * time.Millisecond
	logEvery  = 10 * time.Second // at most one log line per this while closing
)

// Limiter keeps CoreDNS's TCP connections on the addresses it is told within Limits.
type Limiter struct {
	log *zap.Logger
	lim Limits

	mu        sync.Mutex
	listeners map[netip.AddrPort]bool

	stop, done chan struct{}
	closed     int       // since the last log line
	logged     time.Time // when
}

// Start runs a Limiter until Stop; it watches nothing until Watch.
func Start(log *zap.Logger, lim Limits) *Limiter {
	l := &Limiter{log: log, lim: lim, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// Watch sets the TCP listeners whose connections count (CoreDNS's, after every start and reload).
func (l *Limiter) Watch(listeners []netip.AddrPort) {
	m := map[netip.AddrPort]bool{}
	for _, a := range listeners {
		m[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())] = true
	}
	l.mu.Lock()
	l.listeners = m
	l.mu.Unlock()
	l.log.Debug("watching tcp listeners", zap.Int("listeners", len(m)))
}

// Stop ends the passes.
func (l *Limiter) Stop() {
	close(l.stop)
	<-l.done
}

func (l *Limiter) run() {
	defer close(l.done)
	t := time.NewTimer(idleEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if l.pass() > 0 {
			t.Reset(busyEvery)
		} else {
			t.Reset(idleEvery)
		}
	}
}

// pass closes what is over the limits and returns how many it closed.
func (l *Limiter) pass() int {
	l.mu.Lock()
	listeners := l.listeners
	l.mu.Unlock()
	if len(listeners) == 0 {
		return 0
	}
	conns, err := held(listeners)
	if err != nil {
		l.log.Warn("list tcp connections", zap.Error(err))
		return 0
	}
	n := 0
	for _, c := range choose(conns, l.lim) {
		if kill(c) {
			n++
		}
	}
	l.closed += n
	if l.closed > 0 && time.Since(l.logged) >= logEvery {
		l.log.Warn("tcp connections over the cap closed", zap.Int("closed", l.closed), zap.Int("held", len(conns)-n),
			zap.Int("per_source", l.lim.PerSource), zap.Int("total", l.lim.Total))
		l.closed, l.logged = 0, time.Now()
	}
	return n
}
