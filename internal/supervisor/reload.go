package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/configwatch"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/runner"
)

// coreDNS is the embedded CoreDNS as the reloader sees it ([*dnsserver.Server]).
type coreDNS interface {
	Reload(corefile []byte) (changed bool, err error)
	Corefile() []byte
	Generation() int
}

var _ coreDNS = (*dnsserver.Server)(nil)

// reloader re-renders the Corefile after a ConfigMap change or SIGUSR1 and reloads CoreDNS in-process, one
// pass at a time on its runner (1 s to 30 s backoff on failure). A new configuration that forwards to itself
// is refused: before it serves when the Corefile says so outright (a forward to the block's own address), or
// by putting the previous one back when the `loop` directive's probe finds it.
type reloader struct {
	log    *zap.Logger
	m      *metrics.Metrics
	config *renderer
	dns    coreDNS
	runner *runner.Runner
	// reloaded, when set, is called after each reload that changed the configuration (listeners.go).
	reloaded func()

	// fatal receives a loop in the first configuration: start-up fails.
	fatal chan error
	// pendingLoop is the generation found looping, 0 when none; the loop directive sets it from a DNS goroutine.
	pendingLoop atomic.Int32
	// Touched only by passes, on the runner's goroutine.
	prev    []byte // the configuration that served before the last reload
	refused []byte // a configuration reverted for a loop: not applied again until it changes
}

func newReloader(log *zap.Logger, m *metrics.Metrics, config *renderer, dns coreDNS) *reloader {
	r := &reloader{log: log, m: m, config: config, dns: dns, fatal: make(chan error, 1)}
	r.runner = runner.New(runner.Config{MaxInterval: 24 * time.Hour, BackoffMin: time.Second, BackoffMax: 30 * time.Second}, r.pass)
	return r
}

// start runs the reload runner, the ConfigMap watcher and the SIGUSR1 handler until ctx is done.
func (r *reloader) start(ctx context.Context, wg *sync.WaitGroup, watcher *configwatch.Watcher) {
	wg.Go(func() { r.runner.Run(ctx) })
	wg.Go(func() { watcher.Run(ctx, func() { r.runner.Trigger("configmap") }) })
	wg.Go(func() { r.onSIGUSR1(ctx) })
}

// pass re-renders and reloads CoreDNS. On any error the running configuration keeps serving; a refused
// kube-dns ConfigMap alone leaves the rest of a change to apply.
func (r *reloader) pass(_ context.Context, reasons []string) (changed bool, err error) {
	start := time.Now()
	if r.revertLoop() {
		return true, nil
	}
	cf, kd, kdErr, err := r.config.latest()
	if err == nil && r.refused != nil && bytes.Equal(r.refused, cf) {
		// Counted once, when it was reverted: every server block that loops reports the same configuration,
		// and each report or later trigger lands here.
		r.log.Info("configuration still the one refused for a forwarding loop; the previous one keeps serving", zap.Strings("triggers", reasons))
		return false, nil
	}
	if err == nil {
		prev := r.dns.Corefile()
		if changed, err = r.dns.Reload(cf); changed {
			r.prev = prev
		}
	}
	var loop *dnsserver.LoopError
	if errors.As(err, &loop) {
		// Stated in the Corefile (a forward to the block's own address): refused before it served.
		r.refused = cf
		r.m.Reloads.WithLabelValues("loop").Inc()
		r.log.Error("reload refused: the new configuration forwards to itself; the running one keeps serving", zap.Strings("triggers", reasons), zap.Error(err))
		return false, nil
	}
	if err != nil {
		setupError(r.m, metrics.ErrConfigmap)
		r.m.Reloads.WithLabelValues("error").Inc()
		r.log.Error("configuration change refused; the running configuration keeps serving", zap.Strings("triggers", reasons), zap.Error(err))
		// Retried with backoff (1 s doubling to 30 s) as well as on the next change: a reload can fail for a
		// reason that passes (an address not yet bindable, a plugin's transient error), and a ConfigMap that
		// stays bad costs one render and parse per backoff step.
		return false, err
	}
	r.config.accept(kd)
	result := "unchanged"
	switch {
	case changed:
		result = "reloaded"
		r.config.write(cf)
		r.m.ReloadDuration.Observe(time.Since(start).Seconds())
		r.log.Info("reloaded coredns", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
		if r.reloaded != nil {
			r.reloaded()
		}
	case kdErr != nil:
		result = "error" // the change was the refused kube-dns ConfigMap: nothing of it applied
	default:
		// Said at info level: an operator who sends SIGUSR1 (or edits a key nothing reads) learns it was heard.
		r.log.Info("configuration unchanged; coredns keeps running", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	}
	r.m.Reloads.WithLabelValues(result).Inc()
	return changed, nil
}

// onLoop is called by the `loop` directive (dnsserver/loop.go), from a DNS goroutine. A loop in the first
// configuration fails start-up through the orderly shutdown (our table goes, the ClusterIP fails open to
// kube-dns, the pod restarts); a loop in a reloaded configuration makes the next pass put the previous
// configuration back.
func (r *reloader) onLoop(e *dnsserver.LoopError) {
	if e.Generation <= 1 {
		select {
		case r.fatal <- fmt.Errorf("start-up refused: %w", e):
		default:
		}
		return
	}
	r.pendingLoop.Store(int32(e.Generation))
	r.runner.Trigger("loop")
}

// revertLoop puts the previous configuration back when the running one was found looping.
func (r *reloader) revertLoop() bool {
	gen := int(r.pendingLoop.Swap(0))
	if gen == 0 || gen != r.dns.Generation() {
		return false // none, or a later reload already replaced it
	}
	r.refused = r.dns.Corefile()
	r.m.Reloads.WithLabelValues("loop").Inc()
	if _, err := r.dns.Reload(r.prev); err != nil {
		r.log.Error("reload refused for a forwarding loop, and putting the previous configuration back failed", zap.Error(err))
		return true
	}
	r.config.write(r.prev)
	r.log.Error("reload refused: the new configuration forwards to itself; the previous one serves again")
	if r.reloaded != nil {
		r.reloaded()
	}
	return true
}

// onSIGUSR1 reloads on SIGUSR1, as CoreDNS does and as node-cache's -reloadwithsignal relies on. It is always
// on: without a handler the signal's default action would kill the agent.
func (r *reloader) onSIGUSR1(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			r.runner.Trigger("sigusr1")
		}
	}
}
