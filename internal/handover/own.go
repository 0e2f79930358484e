package handover

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// OwnSockets calls f with each of this process's descriptors that is a socket, and the socket's inode (as
// the kernel's socket table names it), until f returns an error (which it returns). The embedded CoreDNS does
// not hand out its sockets, so whoever needs one (the leaving instance, the fast path, internal/connlimit)
// finds it here, in the process's own fd table. A descriptor may be closed, or its number reused, between the
// listing and f.
func OwnSockets(f func(fd int, inode uint64) error) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list own descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		ino, ok := strings.CutPrefix(target, "socket:[")
		if !ok {
			continue
		}
		inode, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64)
		if err != nil {
			continue
		}
		if err := f(fd, inode); err != nil {
			return err
		}
	}
	return nil
}

// OwnUDPSockets calls f with each of this process's descriptors that is a UDP socket, and the address it is
// bound to, until f returns an error (which it returns): OwnSockets, for the leaving instance (DetachBound)
// and the fast path. f checks again (BoundUDP) on a duplicate it means to keep.
func OwnUDPSockets(f func(fd int, bound netip.AddrPort) error) error {
	return OwnSockets(func(fd int, _ uint64) error {
		if bound, ok := BoundUDP(fd); ok {
			return f(fd, bound)
		}
		return nil
	})
}

// BoundUDP says whether fd is a UDP socket, and the address it is bound to (IPv4-mapped addresses unmapped).
func BoundUDP(fd int) (netip.AddrPort, bool) {
	if t, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || t != syscall.SOCK_DGRAM {
		return netip.AddrPort{}, false
	}
	if p, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, 0x26 /* SO_PROTOCOL */); err != nil || p != syscall.IPPROTO_UDP {
		return netip.AddrPort{}, false
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, false
	}
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}
