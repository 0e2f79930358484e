package supervisor

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Handing over DNS between two instances without dropping a query.
//
// Both instances' UDP listeners sit in one SO_REUSEPORT group and the kernel hashes every query to one of
// them. Closing a socket drops the datagrams queued on it, so an instance that just stopped CoreDNS would lose
// the few queries that arrived since its last read. Connecting a UDP socket takes it out of the group's hash
// selection (reuseport_select_sock_by_hash in net/core/sock_reuseport.c skips connected sockets) and makes it
// match only its peer; connected to its own address, it receives nothing new, while what is queued stays
// readable. The leaving instance detaches its listeners, lets CoreDNS answer what is queued,
// then stops. The listeners belong to the embedded CoreDNS, which does not hand them out, so they are found
// among the process's descriptors by their bound address.

// detachListeners connects every UDP socket of this process bound to one of ips on port to its own address.
// It returns how many it detached.
func detachListeners(ips []netip.Addr, port uint16) (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("list own descriptors: %w", err)
	}
	n := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(target, "socket:") {
			continue
		}
		if typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || typ != syscall.SOCK_DGRAM {
			continue
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			continue
		}
		var addr netip.Addr
		var p int
		switch a := sa.(type) {
		case *syscall.SockaddrInet4:
			addr, p = netip.AddrFrom4(a.Addr), a.Port
		case *syscall.SockaddrInet6:
			addr, p = netip.AddrFrom16(a.Addr), a.Port
		default:
			continue
		}
		if p != int(port) || !slices.Contains(ips, addr.Unmap()) {
			continue
		}
		if err := syscall.Connect(fd, sa); err != nil {
			return n, fmt.Errorf("detach udp listener %s: %w", netip.AddrPortFrom(addr, port), err)
		}
		n++
	}
	return n, nil
}
