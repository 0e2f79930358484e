package sockholder

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
)

// Owner says who has the far end of a connection open (PeerOwner).
type Owner int

const (
	// OwnerUnknown: no process has it open when looked at: not accepted yet, or accepted and closed already
	// (a server that stops closes what it accepted, at once after answering). Nothing says whose it was.
	OwnerUnknown Owner = iota
	// OwnerThis: this process has it open.
	OwnerThis
	// OwnerOther: a file of another process has it, and still had it after this process's descriptors were
	// looked through.
	OwnerOther
)

func (o Owner) String() string {
	return [...]string{"unknown", "this process", "another process"}[o]
}

// PeerOwner says who has open the socket at the other end of c, a TCP connection this process made to a local
// address: whether the listener that accepted it is this process's. Several processes can listen on one address
// and port with SO_REUSEPORT (two agents on a node during a surge), and the kernel picks one per connection;
// only the accepted socket says which, and only while it is open.
//
// A socket being closed leaves the descriptor table first and the socket table's inode last (close(2) drops the
// descriptor, then releases the file): between the two it looks held by nobody here. So a socket that is not
// among this process's descriptors is another's only if the socket table still names its file after the
// descriptors were read; one whose file is gone meanwhile was closed, by whoever had it: OwnerUnknown, never
// OwnerOther. (Issue 39: during a reload the stopping server closed a connection of this process just after
// answering it, and the probe called it another instance's.)
func PeerOwner(c net.Conn) (Owner, error) {
	local, err1 := netip.ParseAddrPort(c.LocalAddr().String())
	remote, err2 := netip.ParseAddrPort(c.RemoteAddr().String())
	if err1 != nil || err2 != nil {
		return OwnerUnknown, fmt.Errorf("not a TCP/IP connection: %s -> %s", c.LocalAddr(), c.RemoteAddr())
	}
	local, remote = netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	inode, found := farEnd(local, remote)
	if !found {
		return OwnerUnknown, fmt.Errorf("connection %s -> %s: the far end is not in /proc/self/net/tcp", local, remote)
	}
	if inode == 0 {
		return OwnerUnknown, nil
	}
	if hasSocket("/proc/self/fd", inode) {
		return OwnerThis, nil
	}
	if again, _ := farEnd(local, remote); again != inode {
		return OwnerUnknown, nil // closed while we looked
	}
	return OwnerOther, nil
}

// farEnd finds the socket bound to remote and connected to local: its inode (0 when no file has it), and
// whether it is there at all.
func farEnd(local, remote netip.AddrPort) (uint64, bool) {
	for _, f := range []string{"tcp", "tcp6"} {
		for _, e := range readTable(filepath.Join("/proc/self/net", f)) {
			if e.local == remote && e.remote == local {
				return e.inode, true
			}
		}
	}
	return 0, false
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
