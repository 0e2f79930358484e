package metrics

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/coredns/coredns/plugin/pkg/reuseport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve serves g on addr at /metrics until ctx is done. The listener uses SO_REUSEPORT so that two instances
// can overlap on a node during a surge rollout.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer) error {
	ln, err := reuseport.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
