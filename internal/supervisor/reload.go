package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// latest renders the Corefile from the base file and the kube-dns ConfigMap as they are now. A kube-dns ConfigMap
// that is refused is reported (kdErr) and replaced by the last one accepted, the empty one before any, so that a
// change of the base still applies while kube-dns is broken (node-cache keeps its last valid config the same way;
// but it never looks again at one that was bad at start-up, and our watcher does). kd is what was rendered.
func (s *Supervisor) latest() (cf []byte, kd corefile.KubeDNS, kdErr, err error) {
	base, err := os.ReadFile(s.opts.BaseCorefile)
	if err != nil {
		return nil, kd, nil, fmt.Errorf("read -basecorefile: %w", err)
	}
	if kd, kdErr = corefile.LoadKubeDNS(s.kubeDNSDir); kdErr != nil {
		s.setupError(metrics.ErrConfigmap)
		s.log.Error("kube-dns configmap refused; keeping the last one accepted until it is fixed",
			zap.String("dir", s.kubeDNSDir), zap.Error(kdErr))
		kd = s.kubeDNS
	}
	if cf, err = corefile.Render(base, kd, s.params); err != nil {
		return nil, kd, kdErr, fmt.Errorf("%s: %w", s.opts.BaseCorefile, err)
	}
	return cf, kd, kdErr, nil
}

// render renders the Corefile at start-up. A base Corefile that does not render is an error: there is nothing
// to serve.
func (s *Supervisor) render() ([]byte, error) {
	cf, kd, _, err := s.latest()
	if err != nil {
		return nil, err
	}
	s.kubeDNS = kd
	return cf, nil
}

// reloadPass re-renders after a ConfigMap change or SIGUSR1 and reloads CoreDNS in-process. On any error the
// running configuration keeps serving; a refused kube-dns ConfigMap alone leaves the rest of a change to apply.
func (s *Supervisor) reloadPass(_ context.Context, reasons []string) (changed bool, err error) {
	start := time.Now()
	if s.revertLoop() {
		return true, nil
	}
	cf, kd, kdErr, err := s.latest()
	if err == nil && s.loops.isRefused(cf) {
		// Counted once, when it was reverted: every server block that loops reports the same configuration,
		// and each report or later trigger lands here.
		s.log.Info("configuration still the one refused for a forwarding loop; the previous one keeps serving", zap.Strings("triggers", reasons))
		return false, nil
	}
	if err == nil {
		prev := s.dns.Corefile()
		if changed, err = s.dns.Reload(cf); changed {
			s.loops.reloaded(prev)
		}
	}
	if err != nil {
		s.setupError(metrics.ErrConfigmap)
		withMetrics(s.m, func(m *metrics.Metrics) { m.Reloads.WithLabelValues("error").Inc() })
		s.log.Error("configuration change refused; the running configuration keeps serving", zap.Strings("triggers", reasons), zap.Error(err))
		// Retried with backoff (1 s doubling to 30 s) as well as on the next change: a reload can fail for a
		// reason that passes (an address not yet bindable, a plugin's transient error), and a ConfigMap that
		// stays bad costs one render and parse per backoff step.
		return false, err
	}
	s.kubeDNS = kd
	result := "unchanged"
	switch {
	case changed:
		result = "reloaded"
		s.writeCorefile(cf)
		withMetrics(s.m, func(m *metrics.Metrics) { m.ReloadDuration.Observe(time.Since(start).Seconds()) })
		s.log.Info("reloaded coredns", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	case kdErr != nil:
		result = "error" // the change was the refused kube-dns ConfigMap: nothing of it applied
	default:
		// Said at info level: an operator who sends SIGUSR1 (or edits a key nothing reads) learns it was heard.
		s.log.Info("configuration unchanged; coredns keeps running", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	}
	withMetrics(s.m, func(m *metrics.Metrics) { m.Reloads.WithLabelValues(result).Inc() })
	return changed, nil
}

// loopState is what the supervisor knows of forwarding loops the `loop` directive found (dnsserver/loop.go).
type loopState struct {
	fatal   chan error // a loop in the first configuration: start-up fails
	pending atomic.Int32
	mu      sync.Mutex
	prev    []byte // the configuration that served before the last reload
	refused []byte // a configuration reverted for a loop: not applied again until it changes
}

func (l *loopState) reloaded(prev []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prev = prev
}

func (l *loopState) isRefused(cf []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused != nil && bytes.Equal(l.refused, cf)
}

// fatal is where a loop in the first configuration is reported.
func (s *Supervisor) fatal() <-chan error { return s.loops.fatalCh() }

func (l *loopState) fatalCh() chan error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatal == nil {
		l.fatal = make(chan error, 1)
	}
	return l.fatal
}

// onLoop is called by the `loop` directive. A loop in the first configuration fails start-up through the
// orderly shutdown (our table goes, the ClusterIP fails open to kube-dns, the pod restarts); a loop in a
// reloaded configuration makes the reload runner put the previous configuration back.
func (s *Supervisor) onLoop(e *dnsserver.LoopError) {
	if e.Generation <= 1 {
		select {
		case s.loops.fatalCh() <- fmt.Errorf("start-up refused: %w", e):
		default:
		}
		return
	}
	s.loops.pending.Store(int32(e.Generation))
	s.reloads.trigger("loop")
}

// revertLoop puts the previous configuration back when the running one was found looping.
func (s *Supervisor) revertLoop() bool {
	gen := int(s.loops.pending.Swap(0))
	if gen == 0 || gen != s.dns.Generation() {
		return false // none, or a later reload already replaced it
	}
	s.loops.mu.Lock()
	prev := s.loops.prev
	s.loops.refused = s.dns.Corefile()
	s.loops.mu.Unlock()
	withMetrics(s.m, func(m *metrics.Metrics) { m.Reloads.WithLabelValues("loop").Inc() })
	if _, err := s.dns.Reload(prev); err != nil {
		s.log.Error("reload refused for a forwarding loop, and putting the previous configuration back failed", zap.Error(err))
		return true
	}
	s.writeCorefile(prev)
	s.log.Error("reload refused: the new configuration forwards to itself; the previous one serves again")
	return true
}

// writeCorefile writes the Corefile for operators to read, atomically (temp file + rename). It is not what
// CoreDNS reads, so a read-only location is only a warning.
func (s *Supervisor) writeCorefile(cf []byte) {
	path := s.opts.Corefile
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, cf) {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".Corefile-*")
	if err == nil {
		_, err = tmp.Write(cf)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		s.log.Warn("write rendered corefile (serving it anyway)", zap.String("path", path), zap.Error(err))
		return
	}
	s.log.Debug("wrote corefile", zap.String("path", path), zap.ByteString("corefile", cf))
}

// onSIGUSR1 reloads on SIGUSR1, as CoreDNS does and as node-cache's -reloadwithsignal relies on. It is always
// on: without a handler the signal's default action would kill the agent.
func (s *Supervisor) onSIGUSR1(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			s.reloads.trigger("sigusr1")
		}
	}
}
