package dnsserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
)

// The health socket (Options.HealthSocket) serves /health and /ready on a Unix socket for the kubelet's exec
// probes (`nodelocaldns -probe`), which run inside this pod's container and so see this pod's volume only.
//
// With hostNetwork every instance on a node shares every address and port, so a probe over TCP reaches whichever
// instance the kernel picks from the SO_REUSEPORT group: during a surge the kubelet could kill the healthy new pod
// for a wedged old one, or never kill the wedged one. And every pod can reach the TCP health address. A path in
// the pod's own emptyDir is reachable by this process alone, and by nothing on the network.

// listenHealthSocket binds the Unix socket at path. A socket file left there by this pod's previous container
// (the emptyDir outlives container restarts) is replaced; one that a live process still answers on is not, since
// taking it over would send that process's probes here.
func listenHealthSocket(path string, pool *listenlimit.Pool) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("health socket %s: exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("health socket %s: another live process serves it (two agents given one path?)", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("health socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("health socket %s: remove the stale socket: %w", path, err)
		}
	}
	ln, err := pool.OpenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("health socket %s: %w", path, err)
	}
	return ln, nil // closing it removes the file (net.UnixListener's default)
}

// openHealthSocket starts the health socket's server if one is configured and not yet open. Called with s.mu
// held, after a successful start or restart.
func (s *Server) openHealthSocket() error {
	if s.socketPath == "" || s.socket != nil {
		return nil
	}
	ln, err := listenHealthSocket(s.socketPath, listenlimit.NewPool(listenlimit.HealthSocket()))
	if err != nil {
		return err
	}
	s.socket = s.serveHealth(ln, s.socketMux())
	s.log.Info("health listening", zap.String("socket", s.socketPath))
	return nil
}

// closeHealthSocket stops the health socket's server; called with s.mu held when CoreDNS stops.
func (s *Server) closeHealthSocket() {
	if s.socket != nil {
		s.socket.close()
		s.socket = nil
	}
}
