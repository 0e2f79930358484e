package fastpath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/handover"
)

// listener serves one address: the fast path's reuseport sockets with a reader each, and the miss workers that
// hand CoreDNS what they do not answer.
type listener struct {
	log   *zap.Logger
	addr  netip.AddrPort
	conns []*net.UDPConn
	sends []int          // each conn's reader's send socket (batch.go's sendSocket), the first also the miss workers'; closed after both
	core  []*net.UDPConn // CoreDNS's sockets (duplicates), detached (internal/handover) while the fast path serves
	view  atomic.Pointer[view]
	miss  *misses
	done  chan struct{} // closed by close: stops the sweeper
	// updated has a token after update (a new view, a new store): it wakes a sweeper paused on the old store.
	updated chan struct{}
	wg      sync.WaitGroup
	// readers are the conns' readers; draining, once set, makes each read what is queued on its socket and
	// stop (drain).
	readers  sync.WaitGroup
	draining atomic.Bool

	hit     atomic.Pointer[hitFunc] // answers a datagram from the store: answerHit, or a test's
	panics  panicLog
	metrics *Metrics
	clients *clients.Accounting // nil: no per-client accounting
}

// hitFunc builds the answer to q from the store into out, and returns the entry it answered from (nil: none).
type hitFunc func(q []byte, from netip.AddrPort, out []byte, now time.Time) ([]byte, *entry)

// answerHit is the hit path: the current view's store. What it builds goes out with the batch's sendmmsg
// (batch.go).
func (l *listener) answerHit(q []byte, _ netip.AddrPort, out []byte, now time.Time) ([]byte, *entry) {
	return l.view.Load().answer(q, out, now)
}

func openListener(log *zap.Logger, m *Metrics, acct *clients.Accounting, addr netip.AddrPort, core []*net.UDPConn, v *view, n int) (*listener, error) {
	l := &listener{log: log, metrics: m, clients: acct, addr: addr, core: core, done: make(chan struct{}),
		updated: make(chan struct{}, 1)}
	l.view.Store(v)
	hit := hitFunc(l.answerHit)
	l.hit.Store(&hit)
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	for range n {
		pc, err := lc.ListenPacket(context.Background(), "udp", addr.String())
		if err != nil {
			l.closeConns()
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		l.conns = append(l.conns, pc.(*net.UDPConn))
	}
	for _, c := range l.conns {
		fd, err := sendSocket(c)
		if err != nil {
			l.closeConns()
			l.closeSends()
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		l.sends = append(l.sends, fd)
	}
	// CoreDNS's UDP serving (dnsserver.Server.ServePacket) with the fast path's handler around CoreDNS's.
	l.miss = newMisses(l.conns[0], l.sends[0], l)
	for i, c := range l.conns {
		l.readers.Go(func() { l.read(c, l.sends[i]) })
	}
	l.wg.Go(l.sweep)
	for _, c := range core {
		if err := detachCore(c); err != nil {
			l.close()
			return nil, fmt.Errorf("steer the kernel away from coredns's socket: %w", err)
		}
	}
	return l, nil
}

// read answers hits and hands the rest to CoreDNS, a batch at a time (batch.go), until the socket is closed.
func (l *listener) read(c *net.UDPConn, send int) {
	b, err := newBatch(c, send, l.metrics)
	if err != nil {
		l.log.Error("fast path reader", zap.Error(err))
		return
	}
	if l.clients != nil {
		b.clients = l.clients.NewShard()
		defer b.clients.Release()
	}
	for {
		n, err := b.recv()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && l.draining.Load() {
				l.readQueued(b)
				return
			}
			if errClosed(err) {
				return
			}
			continue
		}
		l.serveBatch(b, n)
	}
}

// readQueued serves what is queued on a reader's socket, which gets nothing new (drain), until it is empty.
func (l *listener) readQueued(b *batch) {
	for {
		n, err := b.recvQueued()
		var errno syscall.Errno
		switch {
		case errors.As(err, &errno):
			continue // the socket's pending error (an ICMP one), consumed by the call
		case err != nil, n == 0:
			return
		}
		l.serveBatch(b, n)
	}
}

// serveBatch serves the n datagrams of one receive, all received at one moment: the clock is read once for
// them (a hit's duration, as CoreDNS's metrics record it, runs from there), not once per datagram.
func (l *listener) serveBatch(b *batch, n int) {
	v := l.view.Load()
	received := v.now()
	for i := range n {
		l.serve(b, i, received)
	}
	var took time.Duration
	if b.answered.n > 0 {
		took = v.now().Sub(received)
	}
	b.flush()
	b.answered.record(took)
	if b.clients != nil {
		b.clients.Publish()
	}
}

// serve answers the batch's i-th datagram or hands it to CoreDNS. A panic is contained (panic.go).
func (l *listener) serve(b *batch, i int, received time.Time) {
	q, from := b.datagram(i)
	defer l.contain(q, from)
	out, e := (*l.hit.Load())(q, from, b.out[i], received)
	if e == nil {
		l.miss.put(q, from)
		return
	}
	b.out[i] = out
	b.queue(i, out)
	b.answered.add(e)
	if b.clients != nil {
		b.clients.Hit(from, e.name, e.rcode)
	}
}

// sweep drops what can no longer be served from the current view's store, every sweepEvery while the store
// holds anything. An empty store pauses it until an entry is stored or the view changes: an idle agent wakes
// for nothing (issue 39: at most node-cache's idle CPU).
func (l *listener) sweep() {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-tick.C:
		}
		v := l.view.Load()
		if v.store.sweep(v.now()) > 0 {
			continue
		}
		tick.Stop()
		select {
		case <-l.done:
			return
		case <-v.store.stored:
		case <-l.updated:
		}
		tick.Reset(sweepEvery)
	}
}

// update switches to the view of a new instance (after a reload) and makes sure its sockets are steered away.
// The previous duplicates are closed: one of a socket CoreDNS closed would keep it open.
func (l *listener) update(v *view, core []*net.UDPConn) {
	l.view.Store(v)
	select {
	case l.updated <- struct{}{}:
	default:
	}
	for _, c := range core {
		if err := detachCore(c); err != nil {
			l.log.Warn("steer the kernel away from coredns's socket", zap.Error(err))
		}
	}
	for _, c := range l.core {
		c.Close()
	}
	l.core = core
}

// close gives the address back to CoreDNS's socket, unless a handover detached the fast path's sockets too (then
// the successor's sockets get the queries, and reattaching CoreDNS's would only lose them when it stops: the
// protocol is internal/handover's). Giving it back, the fast path's sockets leave the group the moment CoreDNS's
// joins it, so every new datagram goes to CoreDNS's socket; what they already hold is still answered (drain).
// Then the miss workers stop, answering what they were handed (a slow miss waits for its upstream), and the
// sockets close.
func (l *listener) close() {
	if !detached(l.conns[0]) {
		for _, c := range l.core {
			if err := attach(c); err != nil {
				l.log.Warn("give the address back to coredns's socket", zap.Error(err))
			}
		}
		for _, c := range l.conns {
			if err := detach(c); err != nil {
				l.log.Warn("steer the kernel away from the fast path's socket; datagrams it receives from now on are lost", zap.Error(err))
			}
		}
	}
	defer func() {
		for _, c := range l.core {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.drain(ctx)
	l.miss.shutdown(ctx)
	close(l.done)
	l.closeConns()
	l.readers.Wait()
	l.wg.Wait()
	// The miss workers send on sends[0]: it closes when the last of them is done (shutdown waited at most 5 s
	// for them; a miss still waiting on its upstream keeps it).
	l.miss.afterWorkers(l.closeSends)
}

// drain has each reader serve what is queued on its socket, which no longer gets new datagrams (detached),
// and stop; it returns once every miss among it is with a miss worker, or when ctx ends. A reader blocked
// waiting for a datagram is woken by a read deadline in the past; nothing else sets one.
func (l *listener) drain(ctx context.Context) {
	l.draining.Store(true)
	for _, c := range l.conns {
		c.SetReadDeadline(time.Unix(1, 0))
	}
	read := make(chan struct{})
	go func() { l.readers.Wait(); close(read) }()
	select {
	case <-read:
	case <-ctx.Done():
	}
}

func (l *listener) closeConns() {
	for _, c := range l.conns {
		c.Close()
	}
}

// closeSends closes the send sockets; no reader may run.
func (l *listener) closeSends() {
	for _, fd := range l.sends {
		unix.Close(fd)
	}
	l.sends = nil
}

// detach, attach and detached are internal/handover's for a *net.UDPConn.
func detach(c *net.UDPConn) error { return onRaw(c, handover.Detach) }
func attach(c *net.UDPConn) error { return onRaw(c, handover.Attach) }

func detached(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	return err == nil && handover.Detached(rc)
}

func onRaw(c *net.UDPConn, f func(syscall.RawConn) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return f(rc)
}

// detachCore detaches c, a duplicate of CoreDNS's socket, and bounds a blocking read of it (SO_RCVTIMEO,
// coreReadBound). CoreDNS reads it non-blocking, but caddy's reload makes the new instance's socket from the
// old one's (File, then net.FilePacketConn, whose Fd clears O_NONBLOCK on the file description the two share,
// until it sets it again on its own duplicate): a read the old instance begins in that moment blocks in the
// kernel, and a detached socket receives nothing to end it. Its Stop then waited for ever in Close, and the
// reload with it (1 in about 1,200 reloads just after a start, beside stress-ng). Bounded, the read returns
// EAGAIN and Go's runtime waits in its poller instead, where Close ends it. On the non-blocking reads the
// option changes nothing.
func detachCore(c *net.UDPConn) error {
	if err := onRaw(c, boundBlockingReads); err != nil {
		return fmt.Errorf("bound blocking reads: %w", err)
	}
	return detach(c)
}

// coreReadBound is how long a blocking read of CoreDNS's socket may wait (detachCore).
const coreReadBound = 500 * time.Millisecond

func boundBlockingReads(rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		tv := unix.NsecToTimeval(coreReadBound.Nanoseconds())
		serr = unix.SetsockoptTimeval(int(fd), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	return errors.Join(err, serr)
}
