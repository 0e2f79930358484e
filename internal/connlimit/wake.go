package connlimit

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/handover"
)

// A listener's socket wakes the limiter when a connection is queued on it, through O_ASYNC: the kernel sends
// the file's owner SIGIO from the listener's sk_data_ready (sock_def_readable → sk_wake_async), which runs
// for every connection added to its accept queue, whether or not CoreDNS has accepted it by the time we look.
// (Readiness, by epoll on a duplicate, loses those events: epoll reports what poll says when it reads the
// ready list, and CoreDNS's accept has emptied the queue by then.)
//
// The flag and the owner belong to the open file description, which CoreDNS's descriptor, ours and caddy's
// copies on reload (File, then FileListener: dup each time) all share: set once, they last as long as the
// listening socket, and go with it. Nothing outside the process holds the description (no descriptor of it is
// passed on), so no signal can reach another process once this one is gone, and the kernel keeps nothing
// of ours after it. Go's runtime ignores SIGIO nobody asked for, so a signal after Stop is harmless.

// armed is a watched listener whose socket wakes us: its descriptor in this process (CoreDNS's, not ours: it
// may be closed and its number reused, which check notices) and its address.
type armed struct {
	fd   int
	addr netip.AddrPort
}

// arm finds this process's TCP listening sockets on listeners and makes each send us SIGIO when a connection
// is queued on it. It returns those it armed and the listeners it found no socket for.
func arm(listeners map[netip.AddrPort]bool) ([]armed, []netip.AddrPort, error) {
	found := map[netip.AddrPort]bool{}
	var out []armed
	err := eachListener(listeners, func(fd int, a netip.AddrPort) error {
		if err := setAsync(fd); err != nil {
			return fmt.Errorf("wake on connections to %s: %w", a, err)
		}
		out = append(out, armed{fd: fd, addr: a})
		found[a] = true
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var missing []netip.AddrPort
	for a := range listeners {
		if !found[a] {
			missing = append(missing, a)
		}
	}
	return out, missing, nil
}

// eachListener calls f with each of this process's TCP listening sockets on one of addrs (its descriptor and
// address), and stops at f's first error.
func eachListener(addrs map[netip.AddrPort]bool, f func(fd int, a netip.AddrPort) error) error {
	return handover.OwnSockets(func(fd int, _ uint64) error {
		if a, ok := listening(fd); ok && addrs[a] {
			return f(fd, a)
		}
		return nil
	})
}

// addrSet is addrs as a set, IPv4-mapped addresses as IPv4 (as listening reports them).
func addrSet(addrs []netip.AddrPort) map[netip.AddrPort]bool {
	m := map[netip.AddrPort]bool{}
	for _, a := range addrs {
		m[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())] = true
	}
	return m
}

// listening says whether fd is a listening TCP socket, and its address. Go's listeners are MPTCP sockets
// where the kernel has MPTCP (Go 1.24's default; CoreDNS's too): what they accept from a plain TCP client is
// a plain TCP socket, and their accept queue is their first subflow's, whose sk_data_ready wakes the MPTCP
// socket (net/mptcp/subflow.c subflow_data_ready).
func listening(fd int) (netip.AddrPort, bool) {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		return netip.AddrPort{}, false
	}
	if p, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || p != unix.IPPROTO_TCP && p != unix.IPPROTO_MPTCP {
		return netip.AddrPort{}, false
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, false
	}
	a, ok := addrPort(sa)
	return a, ok
}

// setAsync makes the file send this process SIGIO on input. F_SETFL replaces the status flags: O_NONBLOCK,
// which Go's runtime relies on, is kept by adding to what F_GETFL reads.
func setAsync(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETOWN, os.Getpid()); err != nil {
		return fmt.Errorf("set owner: %w", err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("get flags: %w", err)
	}
	if fl&unix.O_ASYNC != 0 {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_ASYNC); err != nil {
		return fmt.Errorf("set O_ASYNC: %w", err)
	}
	return nil
}

var errNotListening = errors.New("descriptor is no longer the listener")

// queued returns how many connections wait in l's accept queue (TCP_INFO's tcpi_unacked on a listener is
// sk_ack_backlog; on an MPTCP listener, its first subflow's), or errNotListening when l's descriptor no longer
// is that listener (closed on a reload, its number reused).
func (l armed) queued() (int, error) {
	if a, ok := listening(l.fd); !ok || a != l.addr {
		return 0, errNotListening
	}
	info, err := unix.GetsockoptTCPInfo(l.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, fmt.Errorf("accept queue of %s: %w", l.addr, err)
	}
	return int(info.Unacked), nil
}

// ShutListeners shuts down (shutdown(2)) this process's TCP listening sockets on addrs and returns how many it
// shut: an accept blocked on one fails at once, and each leaves its SO_REUSEPORT group, whoever holds a
// descriptor of it. It is for a server that nothing else can stop: CoreDNS's Server.Stop runs once and skips
// a server whose Serve had not begun, which then serves on.
func ShutListeners(addrs []netip.AddrPort) (int, error) {
	n := 0
	err := eachListener(addrSet(addrs), func(fd int, a netip.AddrPort) error {
		if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil && !errors.Is(err, unix.ENOTCONN) {
			return fmt.Errorf("shut listener %s: %w", a, err)
		}
		n++
		return nil
	})
	return n, err
}
