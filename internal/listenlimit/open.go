package listenlimit

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"github.com/coredns/coredns/plugin/pkg/reuseport"
	"golang.org/x/sys/unix"
)

// Open listens on the TCP address addr within p's bounds. The socket has SO_REUSEPORT, so that two instances
// can overlap on a node during a surge rollout. This, OpenSteered and OpenUnix are the agent's only ways to listen
// (internal/archtest checks that nothing else calls a listen function).
func (p *Pool) Open(addr string) (net.Listener, error) {
	ln, err := reuseport.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return p.wrap(ln), nil
}

// OpenSteered listens on the TCP address addr within p's bounds, as Open, with SO_INCOMING_CPU set to cpu: in
// its SO_REUSEPORT group, the kernel gives it the connections whose SYN that CPU handles (Linux 6.1 and later;
// internal/fastpath's tcp.go relies on it).
func (p *Pool) OpenSteered(addr string, cpu int) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_INCOMING_CPU, cpu)
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return p.wrap(ln), nil
}

// OpenUnix listens on the Unix socket at path within p's bounds. Its clients have no address: they are all one
// source. Closing the listener removes the file.
func (p *Pool) OpenUnix(path string) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return p.wrap(ln), nil
}
