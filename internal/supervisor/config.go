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

// render reads both ConfigMaps and renders the Corefile. A kube-dns ConfigMap that is invalid is reported and
// replaced by the empty configuration at start-up (node-cache does the same, but then never looks at it again;
// our watcher retries on its next change). A base Corefile that does not render is an error.
func (s *Supervisor) render() ([]byte, error) {
	base, err := os.ReadFile(s.opts.BaseCorefile)
	if err != nil {
		return nil, fmt.Errorf("read -basecorefile: %w", err)
	}
	kd, kdErr := corefile.LoadKubeDNS(s.kubeDNSDir)
	if kdErr != nil {
		s.setupError(metrics.ErrConfigmap)
		s.log.Error("kube-dns configmap refused; serving without its stub domains and upstreams until it is fixed",
			zap.String("dir", s.kubeDNSDir), zap.Error(kdErr))
	}
	cf, err := corefile.Render(base, kd, s.params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.opts.BaseCorefile, err)
	}
	return cf, nil
}

// reloadPass re-renders after a ConfigMap change or SIGUSR1 and reloads CoreDNS in-process. On any error the
// running configuration keeps serving.
func (s *Supervisor) reloadPass(_ context.Context, reasons []string) error {
	start := time.Now()
	base, err := os.ReadFile(s.opts.BaseCorefile)
	var kd corefile.KubeDNS
	if err == nil {
		kd, err = corefile.LoadKubeDNS(s.kubeDNSDir)
	}
	var cf []byte
	if err == nil {
		cf, err = corefile.Render(base, kd, s.params)
	}
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
	result := "unchanged"
	if !changed {
		// Said at info level: an operator who sends SIGUSR1 (or edits a key nothing reads) learns it was heard.
		s.log.Info("configuration unchanged; coredns keeps running", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
	} else {
		result = "reloaded"
		s.writeCorefile(cf)
		s.setGauge(func(m *metrics.Metrics) { m.ReloadDuration.Observe(time.Since(start).Seconds()) })
		s.log.Info("reloaded coredns", zap.Strings("triggers", reasons), zap.Duration("elapsed", time.Since(start)))
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

func dirOf(path string) string { return filepath.Dir(path) }
