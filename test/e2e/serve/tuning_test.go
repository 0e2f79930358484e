package serve

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The runtime tuning (cmd/nodelocaldns/tuning.go, stacks.go) as the real binary applies it: GOGC as the Go
// runtime reports it (go_gc_gogc_percent, from the default Go collector), a GOGC in the environment winning,
// NODELOCALDNS_TUNING=off leaving Go's defaults, and, with NODELOCALDNS_STACKS=on (off by default since the fast
// path), goroutines starting at 16 KiB once queries have made the GC run (the fast path off, so that they do).
func TestRuntimeTuning(t *testing.T) {
	testenv.RequireRoot(t)
	harness.StartUpstream(t, "127.0.0.53:53", "10.0.0.53")
	for _, tc := range []struct {
		name   string
		env    []string
		gogc   float64
		stacks bool
	}{
		{"default", nil, 100, false},
		{"GOGC in the environment wins, stacks on request", []string{"GOGC=150", "NODELOCALDNS_STACKS=on", "NODELOCALDNS_FASTPATH=off"}, 150, true},
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
			if v, ok := a.Metric("go_gc_gogc_percent"); !ok || v != tc.gogc {
				t.Errorf("go_gc_gogc_percent = %v (present: %v), want %v", v, ok, tc.gogc)
			}

			stop := load(4)
			defer stop()
			if tc.stacks {
				l := a.WaitLog(30*time.Second, "goroutine stacks sized", func(l harness.LogLine) bool { return l.Msg == "goroutine stacks sized" })
				if got := l.Raw["startbytes"]; got != float64(16<<10) {
					t.Errorf("goroutine stacks sized with startbytes %v, want %d", got, 16<<10)
				}
				return
			}
			time.Sleep(3 * time.Second) // several GC cycles under this load, and stack tuner steps were it running
			for _, l := range a.Lines() {
				if l.Msg == "goroutine stacks sized" || l.Msg == "goroutine stacks" {
					t.Errorf("the stack tuner is off, yet the agent logged %q: %v", l.Msg, l.Raw)
				}
			}
		})
	}
}

// load keeps clients querying one cached name over UDP until the returned stop is called.
func load(clients int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				harness.Lookup(listen, "udp", "kubernetes.default.svc.cluster.local", time.Second)
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
