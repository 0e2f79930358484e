package dnsserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
)

// The `health` directive keeps upstream's syntax (`health [ADDRESS] { lameduck DURATION }`) but its HTTP
// listener belongs to the process, not to a CoreDNS instance.
//
// Upstream's health plugin shuts its server down on every in-process restart (waiting up to 5 s for its own
// self-polling client) and starts a new one afterwards, so the kubelet's liveness probe can fail during a
// reload and a reload can stall for seconds. Here a restart only tells the Server which addresses the new
// Corefile wants; listeners that stay wanted are kept, so /health never blinks. The same listener serves
// /ready, which answers 200 only when the agent's readiness check passes (CoreDNS serving, nftables table and
// interface in place).

const defaultHealthAddr = ":8080"

// Bounds of the health listeners. /ready answers from memory and /health within its probe's timeout
// (supervisor/health.go), so these bound only slow or hostile clients.
const (
	healthReadTimeout  = time.Second     // the whole request, headers included
	healthWriteTimeout = 2 * time.Second // /health's own DNS probe takes up to 900 ms
	healthMaxHeader    = 4 << 10
)

func setupHealth(c *caddy.Controller) error {
	addr, lameduck := defaultHealthAddr, time.Duration(0)
	for c.Next() {
		switch args := c.RemainingArgs(); len(args) {
		case 0:
		case 1:
			if _, _, err := net.SplitHostPort(args[0]); err != nil {
				return plugin.Error("health", err)
			}
			addr = args[0]
		default:
			return plugin.Error("health", c.ArgErr())
		}
		for c.NextBlock() {
			if c.Val() != "lameduck" {
				return plugin.Error("health", c.Errf("unknown property '%s'", c.Val()))
			}
			args := c.RemainingArgs()
			if len(args) != 1 {
				return plugin.Error("health", c.ArgErr())
			}
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return plugin.Error("health", fmt.Errorf("unable to parse lameduck duration value: '%v' : %v", args[0], err))
			}
			lameduck = max(lameduck, d)
		}
	}
	p := pendingFor(c)
	p.health[addr] = true
	p.lameduck = max(p.lameduck, lameduck)
	return nil
}

// httpListener is one HTTP server on one address, kept across reloads.
type httpListener struct {
	srv *http.Server
	ln  net.Listener
}

// syncHealth opens listeners for wanted addresses and closes the ones no longer wanted. Called with s.mu held
// after a successful start or restart; an address that cannot be bound is an error and keeps the others.
func (s *Server) syncHealth(wanted map[string]bool) error {
	var firstErr error
	for addr := range wanted {
		if _, ok := s.health[addr]; ok {
			continue
		}
		// Every pod can reach this address: each source gets its own share of connections (listenlimit.Health,
		// one pool for every health address), so a pod flooding it cannot keep the node's probe, or another pod,
		// out.
		ln, err := s.healthPool.Open(addr)
		if err != nil {
			firstErr = fmt.Errorf("health listener %s: %w", addr, sockholder.Explain(err))
			continue
		}
		hl := s.serveHealth(ln, s.healthMux())
		s.health[addr] = hl
		s.log.Info("health listening", zap.String("address", ln.Addr().String()))
	}
	for addr, hl := range s.health {
		if !wanted[addr] {
			hl.close()
			delete(s.health, addr)
		}
	}
	return firstErr
}

// serveHealth serves /health and /ready on ln until the listener is closed. A connection serves one request
// and closes, so no client holds a connection between requests.
func (s *Server) serveHealth(ln net.Listener, mux *http.ServeMux) *httpListener {
	hl := &httpListener{ln: ln, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: healthReadTimeout,
		ReadTimeout:       healthReadTimeout,
		WriteTimeout:      healthWriteTimeout,
		MaxHeaderBytes:    healthMaxHeader,
	}}
	hl.srv.SetKeepAlivesEnabled(false)
	go hl.srv.Serve(ln)
	return hl
}

func (hl *httpListener) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := hl.srv.Shutdown(ctx); err != nil {
		hl.srv.Close()
	}
}

func (s *Server) healthMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if err := (*s.live.Load())(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, err.Error()+"\n")
			return
		}
		io.WriteString(w, http.StatusText(http.StatusOK))
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.readiness(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, err.Error()+"\n")
			return
		}
		io.WriteString(w, http.StatusText(http.StatusOK))
	})
	return mux
}

// healthAddrs lists the addresses the health listeners are bound to.
func (s *Server) healthAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var addrs []string
	for _, hl := range s.health {
		addrs = append(addrs, hl.ln.Addr().String())
	}
	return addrs
}
