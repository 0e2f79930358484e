package serve

import (
	"net/http"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The runtime tuning (cmd/nodelocaldns/tuning.go) as the real binary applies it: GOGC as the Go runtime reports
// it (go_gc_gogc_percent, from the default Go collector), a GOGC in the environment winning, and
// NODELOCALDNS_TUNING=off leaving Go's defaults. By default the GC percent is paced (gcpace.go): 100 and raised
// while the heap is allocated fast, which the agent's own start can be, so the default case reads the base and
// the pacing from the start's log line and requires the percent in effect to be at least the base.
// NODELOCALDNS_STACKS, which ran a goroutine stack tuner until it was removed, is no longer read: a manifest
// that still sets it starts and serves as without it.
func TestRuntimeTuning(t *testing.T) {
	testenv.RequireRoot(t)
	harness.StartUpstream(t, "127.0.0.53:53", "10.0.0.53")
	for _, tc := range []struct {
		name  string
		env   []string
		gogc  float64
		paced bool
	}{
		{"default", nil, 100, true},
		{"GOGC in the environment wins, NODELOCALDNS_STACKS is ignored", []string{"GOGC=150", "NODELOCALDNS_STACKS=on"}, 150, false},
		{"NODELOCALDNS_TUNING=off", []string{"NODELOCALDNS_TUNING=off"}, 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := startAgent(t, nil, tc.env...)
			// The metrics listener starts beside DNS serving, not before readiness.
			testenv.Eventually(t, 10*time.Second, "metrics served", func() bool {
				resp, err := http.Get("http://" + a.Metrics + "/metrics")
				if err == nil {
					resp.Body.Close()
				}
				return err == nil
			})
			line := a.WaitLog(10*time.Second, "the runtime tuning", func(l harness.LogLine) bool { return l.Msg == "runtime tuning" })
			if paced, _ := line.Raw["gcpaced"].(bool); paced != tc.paced {
				t.Errorf("runtime tuning logged gcpaced=%v, want %v: %v", line.Raw["gcpaced"], tc.paced, line.Raw)
			}
			switch v, ok := a.Metric("go_gc_gogc_percent"); {
			case !ok:
				t.Errorf("go_gc_gogc_percent not exported")
			case tc.paced && v < tc.gogc:
				t.Errorf("go_gc_gogc_percent = %v, want at least the base %v", v, tc.gogc)
			case tc.paced:
				t.Logf("go_gc_gogc_percent = %v (base %v, paced)", v, tc.gogc)
			case v != tc.gogc:
				t.Errorf("go_gc_gogc_percent = %v, want %v", v, tc.gogc)
			}
			if got, err := harness.Lookup(listen, "udp", "kubernetes.default.svc.cluster.local", 2*time.Second); err != nil || got != "10.0.0.53" {
				t.Errorf("lookup: %q, %v; want 10.0.0.53", got, err)
			}
		})
	}
}
