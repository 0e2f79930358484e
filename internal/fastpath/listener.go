package fastpath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// listener serves one address: the fast path's reuseport sockets with a reader each, and the miss server that
// hands CoreDNS what they do not answer.
type listener struct {
	log   *zap.Logger
	addr  netip.AddrPort
	conns []*net.UDPConn
	core  *net.UDPConn // CoreDNS's socket, connected to its own address while the fast path serves
	view  atomic.Pointer[view]
	miss  *missConn
	srv   *dns.Server
	done  chan struct{} // closed by close: stops the sweeper
	wg    sync.WaitGroup
}

func openListener(log *zap.Logger, addr netip.AddrPort, core *net.UDPConn, v *view, n int) (*listener, error) {
	l := &listener{log: log, addr: addr, core: core, done: make(chan struct{})}
	l.view.Store(v)
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
	l.miss = newMissConn(l.conns[0])
	// CoreDNS's UDP server (dnsserver.Server.ServePacket) with the fast path's handler around CoreDNS's.
	l.srv = &dns.Server{PacketConn: l.miss, Net: "udp", Handler: l}
	l.wg.Go(func() {
		if err := l.srv.ActivateAndServe(); err != nil {
			log.Warn("fast path miss server", zap.Error(err))
		}
	})
	for _, c := range l.conns {
		l.wg.Go(func() { l.read(c) })
	}
	l.wg.Go(l.sweep)
	if err := setPeer(core, addr); err != nil {
		l.close()
		return nil, fmt.Errorf("steer the kernel away from coredns's socket: %w", err)
	}
	return l, nil
}

// read answers hits and hands the rest to CoreDNS, until the socket is closed.
func (l *listener) read(c *net.UDPConn) {
	in := make([]byte, 65535)
	out := make([]byte, 0, 4096)
	for {
		n, from, err := c.ReadFromUDPAddrPort(in)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var ok bool
		if out, ok = l.view.Load().answer(c, in[:n], from, out, time.Now()); !ok {
			l.miss.put(in[:n], net.UDPAddrFromAddrPort(from))
		}
	}
}

// sweep drops what can no longer be served from the current view's store, every sweepEvery.
func (l *listener) sweep() {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case now := <-tick.C:
			l.view.Load().store.sweep(now)
		}
	}
}

// update switches to the view of a new instance (after a reload) and makes sure its socket is steered away.
func (l *listener) update(v *view, core *net.UDPConn) {
	l.view.Store(v)
	if core != l.core {
		l.core = core
		if err := setPeer(core, l.addr); err != nil {
			l.log.Warn("steer the kernel away from coredns's socket", zap.Error(err))
		}
	}
}

// close gives the address back to CoreDNS's socket, unless a handover detached the fast path's sockets too (then
// the successor's sockets get the queries, and reattaching CoreDNS's would only lose them when it stops). The miss
// server stops first, answering what it read through the fast path's socket, then the sockets close.
func (l *listener) close() {
	if !connected(l.conns[0]) {
		if err := setPeer(l.core, netip.AddrPort{}); err != nil {
			l.log.Warn("give the address back to coredns's socket", zap.Error(err))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.srv.ShutdownContext(ctx)
	l.miss.Close()
	close(l.done)
	l.closeConns()
	l.wg.Wait()
}

func (l *listener) closeConns() {
	for _, c := range l.conns {
		c.Close()
	}
}

// setPeer connects c to addr, or disconnects it (AF_UNSPEC) when addr is the zero value. A connected UDP
// socket leaves its reuseport group's hash selection and receives only from its peer: connected to its own
// address, nothing.
func setPeer(c *net.UDPConn, addr netip.AddrPort) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if !addr.IsValid() {
			var unspec [16]byte // struct sockaddr, sa_family AF_UNSPEC
			if _, _, e := syscall.Syscall(syscall.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&unspec[0])), uintptr(len(unspec))); e != 0 {
				serr = e
			}
			return
		}
		var sa syscall.Sockaddr
		if a := addr.Addr(); a.Is4() {
			sa = &syscall.SockaddrInet4{Port: int(addr.Port()), Addr: a.As4()}
		} else {
			sa = &syscall.SockaddrInet6{Port: int(addr.Port()), Addr: a.As16()}
		}
		serr = syscall.Connect(int(fd), sa)
	})
	if err != nil {
		return err
	}
	return serr
}

// connected reports whether c has a peer (a handover connected it).
func connected(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	peer := false
	rc.Control(func(fd uintptr) {
		_, err := syscall.Getpeername(int(fd))
		peer = err == nil
	})
	return peer
}
