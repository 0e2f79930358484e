package fastpath

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// coreSockets finds CoreDNS's UDP sockets on addr among the process's own file descriptors: UDP sockets bound
// to addr that are not the fast path's own (told apart by SO_COOKIE, which the kernel never reuses). CoreDNS
// gives an embedder no handle on its sockets; the fd table is the kernel's, and asking it is public API. Each
// is returned as a *net.UDPConn on a duplicate of the descriptor (the same socket: internal/handover's
// connect acts on the socket, not on the descriptor); closing it leaves CoreDNS's open.
func coreSockets(addr netip.AddrPort, own map[uint64]bool) ([]*net.UDPConn, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("list file descriptors: %w", err)
	}
	var out []*net.UDPConn
	seen := map[uint64]bool{}
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + ent.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			continue // closed since the listing
		}
		// Checked on the duplicate: the number may have been reused between the listing and the dup.
		ck := cookie(dup)
		if !isUDPOn(dup, addr) || own[ck] || seen[ck] { // seen: a duplicate of one already found (ours too)
			unix.Close(dup)
			continue
		}
		seen[ck] = true
		f := os.NewFile(uintptr(dup), "coredns-udp")
		pc, err := net.FilePacketConn(f)
		f.Close()
		if err != nil {
			continue
		}
		if uc, ok := pc.(*net.UDPConn); ok {
			out = append(out, uc)
		} else {
			pc.Close()
		}
	}
	return out, nil
}

func isUDPOn(fd int, addr netip.AddrPort) bool {
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_DGRAM {
		return false
	}
	if p, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || p != unix.IPPROTO_UDP {
		return false
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return false
	}
	var got netip.AddrPort
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		got = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		got = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	default:
		return false
	}
	return got == addr
}

// cookie is the socket's SO_COOKIE, or 0.
func cookie(fd int) uint64 {
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		return 0
	}
	return c
}

// connCookie is c's socket's SO_COOKIE, or 0.
func connCookie(c syscall.Conn) uint64 {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var ck uint64
	rc.Control(func(fd uintptr) { ck = cookie(int(fd)) })
	return ck
}
