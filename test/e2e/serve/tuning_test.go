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
// NODELOCALDNS_TUNING=off leaving Go's defaults. NODELOCALDNS_STACKS, which ran a goroutine stack tuner until
// it was removed, is no longer read: a manifest that still sets it starts and serves as without it.
func TestRuntimeTuning(t *testing.T) {
	testenv.RequireRoot(t)
	harness.StartUpstream(t, "127.0.0.53:53", "10.0.0.53")
	for _, tc := range []struct {
		name string
		env  []string
		gogc float64
	}{
		{"default", nil, 100},
		{"GOGC in the environment wins, NODELOCALDNS_STACKS is ignored", []string{"GOGC=150", "NODELOCALDNS_STACKS=on"}, 150},
		{"NODELOCALDNS_TUNING=off", []string{"NODELOCALDNS_TUNING=off"}, 100},
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
			if v, ok := a.Metric("go_gc_gogc_percent"); !ok || v != tc.gogc {
				t.Errorf("go_gc_gogc_percent = %v (present: %v), want %v", v, ok, tc.gogc)
			}
			if got, err := harness.Lookup(listen, "udp", "kubernetes.default.svc.cluster.local", 2*time.Second); err != nil || got != "10.0.0.53" {
				t.Errorf("lookup: %q, %v; want 10.0.0.53", got, err)
			}
		})
	}
}
