package fastpath

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestDetachedCoreSocketClosesAfterABlockingRead: CoreDNS's socket, detached by the fast path, can be closed
// even when a read of it went blocking in the moment caddy's reload clears O_NONBLOCK on it (detachCore).
// Without the bound the read waited in the kernel for a datagram that a detached socket never gets, and Close
// with it: the reload hung. The moment is made here as caddy makes it: O_NONBLOCK cleared on a duplicate
// (the file description is shared), a read entering the kernel meanwhile, O_NONBLOCK set again.
func TestDetachedCoreSocketClosesAfterABlockingRead(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := detachCore(c); err != nil {
		t.Fatal(err)
	}
	// The reader, as miekg/dns's serveUDP: a read with a deadline, again and again until the socket closes.
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, oob := make([]byte, 512), make([]byte, 64)
		for {
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, _, _, _, err := c.ReadMsgUDP(buf, oob); err != nil && !os.IsTimeout(err) {
				return
			}
		}
	}()
	fd := rawFD(t, c)
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	setNonblock(t, dup, false)
	testenv.Eventually(t, 10*time.Second, "the reader blocked in the kernel on the socket", func() bool { return inRecvmsg(t, fd) })
	setNonblock(t, dup, true)

	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10 s later: the read that went blocking holds the socket")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader still reads 10 s after Close")
	}
}

func rawFD(t *testing.T, c *net.UDPConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

func setNonblock(t *testing.T, fd int, on bool) {
	if err := unix.SetNonblock(fd, on); err != nil {
		t.Fatal(err)
	}
}

// inRecvmsg says whether a thread of this process is in recvmsg(2) on fd (/proc/self/task/*/syscall: the
// number, then the arguments, the descriptor first).
func inRecvmsg(t *testing.T, fd int) bool {
	tasks, err := filepath.Glob("/proc/self/task/*/syscall")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d %#x ", unix.SYS_RECVMSG, fd)
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), want) {
			return true
		}
	}
	return false
}
