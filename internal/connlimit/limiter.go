package connlimit

import (
	"errors"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Pass timing. Passes run when a listener says a connection was queued on it; a timer runs only while there
// is something to finish: connections still queued (not yet in CoreDNS's descriptors, where a pass finds
// them), or a pass that closed some (a flood goes on). pollEvery is the fallback when a listener could not be
// armed (not found among our descriptors), and never runs once every listener is.
const (
	minGap    = 2 * time.Millisecond  // between two passes, however fast connections arrive
	busyEvery = 20 * time.Millisecond // while connections are queued or the last pass closed some
	pollEvery = 100 * time.Millisecond
	logEvery  = 10 * time.Second // at most one log line per this while closing
)

// Limiter keeps CoreDNS's TCP connections on the addresses it is told within Limits.
type Limiter struct {
	log *zap.Logger
	lim Limits

	mu        sync.Mutex
	listeners map[netip.AddrPort]bool
	armed     []armed
	missing   int // watched listeners not armed: they are polled

	watched    chan struct{} // a channel of one: Watch asks for a pass
	stop, done chan struct{}
	passes     atomic.Int64 // passes run, for tests
	noDestroy  bool         // SOCK_DESTROY failed for want of kernel support or privilege: shut instead
	closed     int          // since the last log line
	logged     time.Time    // when
	listErr    string       // the last pass's listing error, logged when it changes
}

// Start runs a Limiter until Stop; it watches nothing until Watch.
func Start(log *zap.Logger, lim Limits) *Limiter {
	l := &Limiter{log: log, lim: lim, watched: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	// Notify before the first Watch arms a listener, so that no signal of ours meets SIGIO's default action.
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, unix.SIGIO)
	go l.run(wake)
	return l
}

// Watch sets the TCP listeners whose connections count (CoreDNS's, after every start and reload), arms them
// and takes a pass.
func (l *Limiter) Watch(listeners []netip.AddrPort) {
	m := addrSet(listeners)
	l.mu.Lock()
	l.listeners = m
	l.armLocked()
	l.mu.Unlock()
	l.log.Debug("watching tcp listeners", zap.Int("listeners", len(m)))
	select {
	case l.watched <- struct{}{}:
	default:
	}
}

// Stop ends the passes.
func (l *Limiter) Stop() {
	close(l.stop)
	<-l.done
}

func (l *Limiter) armLocked() {
	a, missing, err := arm(l.listeners)
	if err != nil {
		l.log.Warn("arm tcp listeners", zap.Error(err))
		l.armed, l.missing = nil, len(l.listeners)
		return
	}
	if len(missing) > 0 {
		l.log.Debug("tcp listeners not found, polled", zap.Stringers("listeners", missing))
	}
	l.armed, l.missing = a, len(missing)
}

func (l *Limiter) run(wake chan os.Signal) {
	defer close(l.done)
	defer signal.Stop(wake)
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-wake:
		case <-l.watched:
		case <-t.C:
		}
		t.Stop()
		_, again := l.pass()
		// A burst of signals is one pending pass (the channel holds one); the gap bounds what a flood costs.
		select {
		case <-l.stop:
			return
		case <-time.After(minGap):
		}
		if again > 0 {
			t.Reset(again)
		}
	}
}

// pass closes what is over the limits and returns how many it closed, and when the next pass must run without
// a signal: 0 when nothing is left to finish.
func (l *Limiter) pass() (int, time.Duration) {
	l.passes.Add(1)
	l.mu.Lock()
	listeners := l.listeners
	if l.missing > 0 {
		l.armLocked()
	}
	// The queues first, then the descriptors: a connection accepted in between is among the descriptors, and
	// one queued after the queues were read sends its own signal.
	queued, lost := 0, false
	for _, a := range l.armed {
		n, err := a.queued()
		if errors.Is(err, errNotListening) {
			lost = true
		} else if err != nil {
			queued++ // cannot tell: look again once
		}
		queued += n
	}
	if lost { // a reload closed a listener; Watch re-arms the new ones, this finds any left
		l.armLocked()
	}
	missing := l.missing
	l.mu.Unlock()
	if len(listeners) == 0 {
		return 0, 0
	}
	next := time.Duration(0)
	if queued > 0 {
		next = busyEvery
	} else if missing > 0 {
		next = pollEvery
	}
	conns, err := held(listeners)
	if err == nil && len(choose(conns, l.lim)) > 0 {
		// Over a cap: count only ours (and the queued), which needs the descriptor table.
		conns, err = ours(conns)
	}
	if err != nil {
		// A kernel without inet_diag (tcp_diag) fails every pass alike: say it once, not ten times a second.
		if err.Error() != l.listErr {
			l.log.Warn("list tcp connections", zap.Error(err))
		}
		l.listErr = err.Error()
		return 0, pollEvery
	}
	if l.listErr != "" {
		l.log.Info("listing tcp connections again")
		l.listErr = ""
	}
	n := 0
	if over := choose(conns, l.lim); len(over) > 0 {
		var d *destroyer
		if !l.noDestroy {
			if d, err = newDestroyer(); err != nil {
				l.log.Warn("open sock_diag", zap.Error(err))
			} else {
				defer d.Close()
			}
		}
		for _, c := range over {
			if l.kill(d, c) {
				n++
			}
		}
	}
	if n > 0 {
		next = busyEvery
	}
	l.closed += n
	if l.closed > 0 && time.Since(l.logged) >= logEvery {
		l.log.Warn("tcp connections over the cap closed", zap.Int("closed", l.closed), zap.Int("held", len(conns)-n),
			zap.Int("per_source", l.lim.PerSource), zap.Int("total", l.lim.Total))
		l.closed, l.logged = 0, time.Now()
	}
	return n, next
}

// kill closes c: SOCK_DESTROY, or where the kernel refuses it (built without CONFIG_INET_DIAG_DESTROY, or the
// agent without CAP_NET_ADMIN), the shutdown of its reading side through its descriptor, which cannot reach
// a connection still in a listener's queue: a pass after CoreDNS accepts it does (the queue check asks for one).
func (l *Limiter) kill(d *destroyer, c conn) bool {
	if !l.noDestroy && d != nil {
		err := d.destroy(c)
		switch {
		case err == nil:
			return true
		case errors.Is(err, unix.ENOENT):
			return false // gone meanwhile
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			l.log.Warn("sock_destroy refused, shutting connections through their descriptors instead", zap.Error(err))
			l.noDestroy = true
		default:
			l.log.Debug("sock_destroy", zap.Stringer("remote", c.remote), zap.Error(err))
		}
	}
	return shut(c)
}
