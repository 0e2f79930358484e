package listenlimit

import (
	"fmt"
	"net"

	"github.com/coredns/coredns/plugin/pkg/reuseport"
)

// Open listens on the TCP address addr within p's bounds. The socket has SO_REUSEPORT, so that two instances
// can overlap on a node during a surge rollout. This and OpenUnix are the agent's only ways to listen
// (internal/archtest checks that nothing else calls a listen function).
func (p *Pool) Open(addr string) (net.Listener, error) {
	ln, err := reuseport.Listen("tcp", addr)
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
