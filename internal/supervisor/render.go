package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// renderer turns Corefile.base and the kube-dns ConfigMap into the Corefile, remembers the last ConfigMap
// accepted, and writes the result where operators read it. Start-up renders first; after that only the reload
// runner's goroutine uses it.
type renderer struct {
	log        *zap.Logger
	m          *metrics.Metrics
	base       string // -basecorefile
	out        string // -conf / -corefile: the copy for operators
	kubeDNSDir string // "" when there is no kube-dns ConfigMap
	params     corefile.Params
	kubeDNS    corefile.KubeDNS // the last kube-dns ConfigMap accepted
}

// watchDirs are the directories whose changes may change the Corefile.
func (c *renderer) watchDirs() []string {
	dirs := []string{filepath.Dir(c.base)}
	if c.kubeDNSDir != "" {
		dirs = append(dirs, c.kubeDNSDir)
	}
	return dirs
}

// watchKeys are, per directory of watchDirs, the entries whose changes may change the Corefile: the base file and
// the kube-dns keys read. Anything else written there (a log file next to the template) is not a change.
func (c *renderer) watchKeys() map[string][]string {
	keys := map[string][]string{filepath.Dir(c.base): {filepath.Base(c.base)}}
	if c.kubeDNSDir != "" {
		keys[c.kubeDNSDir] = append(keys[c.kubeDNSDir], corefile.KubeDNSKeys()...)
	}
	return keys
}

// latest renders the Corefile from the base file and the kube-dns ConfigMap as they are now. A kube-dns ConfigMap
// that is refused is reported (kdErr) and replaced by the last one accepted, the empty one before any, so that a
// change of the base still applies while kube-dns is broken (node-cache keeps its last valid config the same way;
// but it never looks again at one that was bad at start-up, and our watcher does). kd is what was rendered.
func (c *renderer) latest() (cf []byte, kd corefile.KubeDNS, kdErr, err error) {
	base, err := os.ReadFile(c.base)
	if err != nil {
		return nil, kd, nil, fmt.Errorf("read -basecorefile: %w", err)
	}
	if kd, kdErr = corefile.LoadKubeDNS(c.kubeDNSDir); kdErr != nil {
		setupError(c.m, metrics.ErrConfigmap)
		c.log.Error("kube-dns configmap refused; keeping the last one accepted until it is fixed",
			zap.String("dir", c.kubeDNSDir), zap.Error(kdErr))
		kd = c.kubeDNS
	}
	if cf, err = corefile.Render(base, kd, c.params); err != nil {
		return nil, kd, kdErr, fmt.Errorf("%s: %w", c.base, err)
	}
	// Render keeps node-cache's output byte for byte; the bound on each forward is ours, added after.
	if cf, _, err = corefile.BoundForwards(cf, c.params.Directives); err != nil {
		return nil, kd, kdErr, fmt.Errorf("%s: %w", c.base, err)
	}
	checkMemory(c.log, c.m, cf, c.params.Directives, cgroupRoot, procSelfCgroup)
	return cf, kd, kdErr, nil
}

// render renders the Corefile at start-up. A base Corefile that does not render is an error: there is nothing
// to serve.
func (c *renderer) render() ([]byte, error) {
	cf, kd, _, err := c.latest()
	if err != nil {
		return nil, err
	}
	c.kubeDNS = kd
	return cf, nil
}

// write writes the Corefile for operators to read, atomically (temp file + rename). It is not what
// CoreDNS reads, so a read-only location is only a warning.
func (c *renderer) write(cf []byte) {
	path := c.out
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
		c.log.Warn("write rendered corefile (serving it anyway)", zap.String("path", path), zap.Error(err))
		return
	}
	c.log.Debug("wrote corefile", zap.String("path", path), zap.ByteString("corefile", cf))
}

// accept makes kd the kube-dns ConfigMap that stands in for a refused one from now on.
func (c *renderer) accept(kd corefile.KubeDNS) { c.kubeDNS = kd }
