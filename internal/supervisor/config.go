package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
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
func (s *Supervisor) reloadPass(_ context.Context, reasons []string) error {
	start := time.Now()
	cf, kd, kdErr, err := s.latest()
	changed := false
	if err == nil {
		changed, err = s.dns.Reload(cf)
	}
	if err != nil {
		s.setupError(metrics.ErrConfigmap)
		s.setGauge(func(m *metrics.Metrics) { m.Reloads.WithLabelValues("error").Inc() })
		s.log.Error("configuration change refused; the running configuration keeps serving", zap.Strings("triggers", reasons), zap.Error(err))
		return nil // a bad ConfigMap is retried on its next change, not in a loop
	}
	s.kubeDNS = kd
	result := "unchanged"
	switch {
	case changed:
		result = "reloaded"
		s.writeCorefile(cf)
		s.setGauge(func(m *metrics.Metrics) { m.ReloadDuration.Observe(time.Since(start).Seconds()) })
		s.log.Info("reloaded coredns", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	case kdErr != nil:
		result = "error" // the change was the refused kube-dns ConfigMap: nothing of it applied
	default:
		// Said at info level: an operator who sends SIGUSR1 (or edits a key nothing reads) learns it was heard.
		s.log.Info("configuration unchanged; coredns keeps running", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	}
	s.setGauge(func(m *metrics.Metrics) { m.Reloads.WithLabelValues(result).Inc() })
	return nil
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
			s.reloads.Trigger("sigusr1")
		}
	}
}
