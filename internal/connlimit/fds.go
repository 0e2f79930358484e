package connlimit

import (
	"cmp"
	"math"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/handover"
)

// held lists the established connections on listeners (a listener on the unspecified address covers its
// port on every address), accepted or still queued, whoever holds them: one filtered dump per family and port.
func held(listeners map[netip.AddrPort]bool) ([]conn, error) {
	type key struct {
		family uint8
		port   uint16
	}
	var dumps []key
	for a := range listeners {
		k := key{unix.AF_INET6, a.Port()}
		if a.Addr().Is4() {
			k.family = unix.AF_INET
		}
		if !slices.Contains(dumps, k) {
			dumps = append(dumps, k)
		}
	}
	slices.SortFunc(dumps, func(a, b key) int { return cmp.Or(cmp.Compare(a.family, b.family), cmp.Compare(a.port, b.port)) })
	var out []conn
	for _, k := range dumps {
		cs, err := established(k.family, k.port)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if listeners[c.local] || listeners[wildcard(c.local)] {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// ours keeps of conns those this process holds, or that wait in a listener's queue (no holder yet: in a
// reuseport group, not necessarily ours), and finds each one's descriptor. It reads the descriptor table, so
// a pass calls it only when something is over a cap.
func ours(conns []conn) ([]conn, error) {
	fds := map[uint32]int{}
	err := handover.OwnSockets(func(fd int, inode uint64) error {
		if inode <= math.MaxUint32 { // sock_diag's inode is 32 bits
			fds[uint32(inode)] = fd
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []conn
	for _, c := range conns {
		c.fd = -1
		if c.inode != 0 {
			fd, ok := fds[c.inode]
			if !ok {
				continue // another process's (another instance in the reuseport group)
			}
			c.fd = fd
		}
		out = append(out, c)
	}
	return out, nil
}

// shut closes c through its descriptor, when SOCK_DESTROY cannot: on a duplicate (so that the number cannot
// be reused under us), checked to still be c, a reset on close (SO_LINGER 0) and the reading side shut, which
// ends CoreDNS's read; CoreDNS closes it.
func shut(c conn) bool {
	if c.fd < 0 {
		return false
	}
	dup, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dup)
	var st unix.Stat_t
	if unix.Fstat(dup, &st) != nil || st.Ino != uint64(c.inode) {
		return false
	}
	unix.SetsockoptLinger(dup, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	return unix.Shutdown(dup, unix.SHUT_RD) == nil
}

func addrPort(sa unix.Sockaddr) (netip.AddrPort, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}

func wildcard(a netip.AddrPort) netip.AddrPort {
	if a.Addr().Is4() {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), a.Port())
	}
	return netip.AddrPortFrom(netip.IPv6Unspecified(), a.Port())
}
