package supervisor

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// backgroundStop bounds how long the metrics endpoint gets to stop once the agent has stopped.
const backgroundStop = 2 * time.Second

// metricsRetry is how often a metrics address that is taken is tried again.
const metricsRetry = 5 * time.Second

// startBackground starts the metrics endpoint before anything else: it should answer while the agent starts.
// The returned function stops it, last of all, and waits for it within backgroundStop.
func (s *Supervisor) startBackground() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if s.gatherer != nil && s.opts.MetricsListenAddress != "" {
		wg.Go(func() { s.serveMetrics(ctx) })
	}
	return func() {
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(backgroundStop):
			s.log.Warn("metrics endpoint did not stop in time", zap.Duration("waited", backgroundStop))
		}
	}
}

// serveMetrics serves /metrics until ctx is done. As in node-cache, the agent serves DNS without its own metrics
// endpoint rather than not at all; unlike node-cache, a failed bind (say, node-cache still holds the port during a
// migration) is retried, so the endpoint appears once the port is free.
func (s *Supervisor) serveMetrics(ctx context.Context) {
	addr := s.opts.MetricsListenAddress
	for {
		err := metrics.Serve(ctx, addr, s.gatherer)
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.Error("metrics server; retrying", zap.String("address", addr), zap.Duration("retry", metricsRetry), zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(metricsRetry):
		}
	}
}
