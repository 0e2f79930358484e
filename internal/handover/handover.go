// Package handover moves a UDP address between sockets of one SO_REUSEPORT group without dropping a datagram,
// by connecting a socket to its own address.
//
// The kernel contract. Sockets bound to one address with SO_REUSEPORT form a group, and the kernel hashes every
// datagram to one of them. A connected UDP socket is skipped by that hash selection
// (reuseport_select_sock_by_hash in net/core/sock_reuseport.c) and matches only datagrams from its peer.
// Connected to its own address, a socket is therefore detached: it receives nothing new, while what is already
// queued on it stays readable. Closing a socket instead drops its queue. Connecting to AF_UNSPEC makes it
// receive again; a group that once had a connected member may no longer spread datagrams by hash (the kernel
// remembers it, sock_reuseport's has_conns), which nothing here needs: CoreDNS's socket is re-attached only as
// the fast path's own are detached, to close.
//
// The protocol between the parties that detach sockets, which this package is the one implementation of:
//   - The fast path (internal/fastpath) stands in for CoreDNS's UDP listener on an address: it opens its own
//     sockets in the group and detaches CoreDNS's, so that its own get the queries. Giving the address back, it
//     re-attaches CoreDNS's socket and detaches its own at once, then answers what they hold before closing
//     them; unless its own sockets are detached already: then the instance is leaving (below), and
//     re-attaching would take queries away from the successor just before we stop.
//   - An instance that leaves while another stays (internal/supervisor) detaches every UDP socket of the
//     process on the listen addresses, CoreDNS's and the fast path's alike ([DetachBound]), lets CoreDNS answer
//     what is queued, then stops: the other instance's sockets get every new query.
//   - A CoreDNS instance that has stopped (internal/dnsserver) detaches those of its UDP sockets still open
//     ([DetachAddrs]): CoreDNS's Stop skips a server whose serving had not begun, which then serves on, and a
//     detached socket gets nothing to serve. The fast path has given the address back and closed its own
//     sockets by then; there is no successor in this process to take queries from.
//
// Nothing else connects a listening socket, so "detached" needs no further bookkeeping: a socket with a peer
// is one of ours that one of these steps detached.
//
// May touch: the process's own UDP sockets, found in /proc/self/fd.
package handover

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"unsafe"
)

// Detach connects the socket to its own address: it leaves its reuseport group's selection.
func Detach(c syscall.RawConn) error {
	return control(c, func(fd int) error {
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			return fmt.Errorf("own address: %w", err)
		}
		return syscall.Connect(fd, sa)
	})
}

// Attach disconnects the socket (AF_UNSPEC): it receives again. The socket must have been bound to its port by
// number, as CoreDNS's listeners are: the kernel drops a kernel-chosen port on disconnect (udp_disconnect).
func Attach(c syscall.RawConn) error {
	return control(c, func(fd int) error {
		var unspec [16]byte // struct sockaddr, sa_family AF_UNSPEC; syscall.Connect has no form for it
		if _, _, e := syscall.Syscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&unspec[0])), uintptr(len(unspec))); e != 0 {
			return e
		}
		return nil
	})
}

// Detached reports whether the socket has a peer, which for a listening socket of ours means it was detached.
func Detached(c syscall.RawConn) bool {
	peer := false
	_ = control(c, func(fd int) error {
		_, err := syscall.Getpeername(fd)
		peer = err == nil
		return nil
	})
	return peer
}

func control(c syscall.RawConn, f func(fd int) error) error {
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// DetachBound detaches every UDP socket of this process bound to one of ips on port and returns how many. It
// finds them among the process's descriptors (/proc/self/fd) by their bound address, because the listeners
// belong to the embedded CoreDNS, which does not hand them out.
func DetachBound(ips []netip.Addr, port uint16) (int, error) {
	return detachWhere(func(bound netip.AddrPort) bool {
		return bound.Port() == port && slices.Contains(ips, bound.Addr())
	})
}

// DetachAddrs detaches every UDP socket of this process bound to one of addrs (IPv4-mapped addresses unmapped,
// as [BoundUDP] reads them) and returns how many. A socket bound to the wildcard address is detached too:
// connected to its own port on loopback, it matches only datagrams from itself.
func DetachAddrs(addrs []netip.AddrPort) (int, error) {
	return detachWhere(func(bound netip.AddrPort) bool { return slices.Contains(addrs, bound) })
}

func detachWhere(match func(bound netip.AddrPort) bool) (int, error) {
	n := 0
	err := OwnUDPSockets(func(fd int, bound netip.AddrPort) error {
		if !match(bound) {
			return nil
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			return nil // closed since the listing
		}
		if err := syscall.Connect(fd, sa); err != nil {
			return fmt.Errorf("detach udp listener %s: %w", bound, err)
		}
		n++
		return nil
	})
	return n, err
}
