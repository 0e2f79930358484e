package connlimit

import (
	"net/netip"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// held lists this process's TCP sockets connected on one of listeners (a listener on the unspecified
// address covers its port on every address). A descriptor may be closed or reused meanwhile: kill checks again.
func held(listeners map[netip.AddrPort]bool) ([]conn, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var out []conn
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, ok := connected(fd)
		if !ok || !(listeners[c.local] || listeners[wildcard(c.local)]) {
			continue
		}
		if info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			c.idle = time.Duration(info.Last_data_recv) * time.Millisecond
		}
		out = append(out, c)
	}
	return out, nil
}

// connected says whether fd is a connected TCP socket (not a listener: it has no peer), and its addresses.
func connected(fd int) (conn, bool) {
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_STREAM {
		return conn{}, false
	}
	if p, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || p != unix.IPPROTO_TCP {
		return conn{}, false
	}
	ls, err := unix.Getsockname(fd)
	if err != nil {
		return conn{}, false
	}
	rs, err := unix.Getpeername(fd)
	if err != nil {
		return conn{}, false
	}
	local, ok1 := addrPort(ls)
	remote, ok2 := addrPort(rs)
	return conn{fd: fd, local: local, remote: remote}, ok1 && ok2
}

// kill closes c if its descriptor still is c: on a duplicate (so that the number cannot be reused under us),
// a reset on close (SO_LINGER 0) and the reading side shut, which ends CoreDNS's read; CoreDNS closes it.
func kill(c conn) bool {
	dup, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dup)
	if now, ok := connected(dup); !ok || now.local != c.local || now.remote != c.remote {
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
