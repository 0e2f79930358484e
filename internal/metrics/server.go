package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/coredns/coredns/plugin/pkg/reuseport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/sockholder"
)

// Bounds of the metrics listener (-metrics-listen-address), which every pod can reach on 0.0.0.0: a scraper
// keeps one connection (two across a reconnect), each source gets 2 (listenlimit), so a pod holding idle
// connections blinds no scraper; 256 in all, above a node's pod count, so a source with no connection always
// finds a place (as for the health listener, dnsserver/health.go): about 3.3 MiB when all are held idle.
var limits = listenlimit.Limits{PerSource: 2, Total: 256}

const idleTimeout = 5 * time.Second

// Serve serves g on addr at /metrics until ctx is done. The listener uses SO_REUSEPORT so that two instances
// can overlap on a node during a surge rollout.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer) error {
	ln, err := reuseport.Listen("tcp", addr)
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
	if err := srv.Serve(listenlimit.Listen(ln, limits)); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
