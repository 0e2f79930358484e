package listeners

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// hog starts CPU hogs, two per CPU, each a process of its own, for the test's life.
func hog(t *testing.T) {
	t.Helper()
	for range 2 * runtime.NumCPU() {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), hogEnv+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
}

// TestLivenessDuringReloadsUnderCPUHog: 20 reloads while hogs keep every CPU busy, and the shipped liveness
// probe (`nodelocaldns -probe /health` over the pod's health socket, whose /health queries our own DNS listener
// over TCP) run back to back throughout: none fails. During a reload the old servers close the connections they
// accepted; the probe's, answered an instant before, was called another instance's, and /health answered 503
// (issue 39; TestNoFailureDuringReloads saw it on a loaded machine).
func TestLivenessDuringReloadsUnderCPUHog(t *testing.T) {
	const (
		reloads   = 20
		probers   = 4                      // probes in flight at once: /health's checks overlap each reload
		reloadGap = 300 * time.Millisecond // between a reload and the next change
	)
	harness.NewNode(t)
	p := startPod(t)
	p.WaitReady()
	base := filepath.Join(p.Dir, "coredns", "Corefile.base")
	standard := harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local")
	hog(t)

	stop := make(chan struct{})
	type result struct{ probes, failures int }
	res := make(chan result)
	for range probers {
		go func() { // the probes, back to back until the reloads are done
			var r result
			for {
				select {
				case <-stop:
					res <- r
					return
				default:
				}
				r.probes++
				if err := p.probe(p.ctr.LivenessProbe); err != nil {
					r.failures++
					t.Logf("liveness probe: %v", err)
				}
			}
		}()
	}
	for n := range reloads {
		// A real change each time: the caches' TTL cap alternates.
		cf := standard
		if n%2 == 0 {
			cf = strings.ReplaceAll(standard, "cache 30", "cache 29")
		}
		if err := os.WriteFile(base+".tmp", []byte(cf), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(base+".tmp", base); err != nil {
			t.Fatal(err)
		}
		seen := 0
		p.WaitLog(30*time.Second, fmt.Sprintf("reload %d", n+1), func(l harness.LogLine) bool {
			if l.Msg == "reloaded coredns" {
				seen++
			}
			return seen > n
		})
		time.Sleep(reloadGap)
	}
	close(stop)
	var r result
	for range probers {
		pr := <-res
		r.probes, r.failures = r.probes+pr.probes, r.failures+pr.failures
	}
	t.Logf("%d reloads under a CPU hog: %d liveness probes, %d failed", reloads, r.probes, r.failures)
	if r.failures > 0 {
		t.Errorf("%d of %d liveness probes failed during %d reloads", r.failures, r.probes, reloads)
	}
}
