package sockholder

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
)

// OwnsPeer reports whether this process has open the socket at the other end of c, a TCP connection this
// process made to a local address: whether the listener that accepted it is this process's. Several processes
// can listen on one address and port with SO_REUSEPORT (two agents on a node during a surge), and the kernel
// picks one per connection; only the accepted socket says which.
func OwnsPeer(c net.Conn) (bool, error) {
	local, err1 := netip.ParseAddrPort(c.LocalAddr().String())
	remote, err2 := netip.ParseAddrPort(c.RemoteAddr().String())
	if err1 != nil || err2 != nil {
		return false, fmt.Errorf("not a TCP/IP connection: %s -> %s", c.LocalAddr(), c.RemoteAddr())
	}
	local, remote = netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	for _, f := range []string{"tcp", "tcp6"} {
		for _, e := range readTable(filepath.Join("/proc/self/net", f)) {
			// The far end: bound to what c reached, connected to where c comes from.
			if e.local != remote || e.remote != local {
				continue
			}
			if e.inode == 0 {
				return false, nil // not accepted (yet): no process has it
			}
			return hasSocket("/proc/self/fd", e.inode), nil
		}
	}
	return false, fmt.Errorf("connection %s -> %s: the far end is not in /proc/self/net/tcp", local, remote)
}

// hasSocket reports whether a descriptor in fdDir refers to the socket with inode.
func hasSocket(fdDir string, inode uint64) bool {
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return false
	}
	want := fmt.Sprintf("socket:[%d]", inode)
	for _, fd := range fds {
		if link, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && link == want {
			return true
		}
	}
	return false
}
