package fastpath

import (
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/handover"
)

// coreSockets finds CoreDNS's UDP sockets on addr among the process's own file descriptors: UDP sockets bound
// to addr that are not the fast path's own (told apart by SO_COOKIE, which the kernel never reuses). CoreDNS
// gives an embedder no handle on its sockets; the fd table is the kernel's, and asking it is public API. Each
// is returned as a *net.UDPConn on a duplicate of the descriptor (the same socket: internal/handover's
// connect acts on the socket, not on the descriptor); closing it leaves CoreDNS's open.
func coreSockets(addr netip.AddrPort, own map[uint64]bool) ([]*net.UDPConn, error) {
	var out []*net.UDPConn
	seen := map[uint64]bool{}
	err := handover.OwnUDPSockets(func(fd int, bound netip.AddrPort) error {
		if bound != addr {
			return nil
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil // closed since the listing
		}
		// Checked on the duplicate: the number may have been reused between the listing and the dup.
		ck := cookie(dup)
		if b, ok := handover.BoundUDP(dup); !ok || b != addr || own[ck] || seen[ck] { // seen: a duplicate of one already found (ours too)
			unix.Close(dup)
			return nil
		}
		seen[ck] = true
		f := os.NewFile(uintptr(dup), "coredns-udp")
		pc, err := net.FilePacketConn(f)
		f.Close()
		if err != nil {
			return nil
		}
		if uc, ok := pc.(*net.UDPConn); ok {
			out = append(out, uc)
		} else {
			pc.Close()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
