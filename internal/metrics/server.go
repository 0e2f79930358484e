package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
)

const idleTimeout = 5 * time.Second

// Serve serves g on addr at /metrics until ctx is done. Every pod can reach the address (0.0.0.0 by default):
// the listener is bounded as listenlimit.AgentMetrics, so a pod holding idle connections blinds no scraper.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer) error {
	ln, err := listenlimit.NewPool(listenlimit.AgentMetrics()).Open(addr)
	if err != nil {
		return sockholder.Explain(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	// A scrape is one request at a time per scraper: a few connections, each bounded in time, and an idle
	// one closed soon (Prometheus reconnects on its next scrape).
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: idleTimeout, MaxHeaderBytes: 8 << 10}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
