package supervisor

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// /health fails while a reconcile or reload pass runs longer than passHung, whatever DNS does.
func TestLivenessFailsOnAHungPass(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	for _, name := range []string{"reconcile", "reload"} {
		t.Run(name, func(t *testing.T) {
			idle := func() *runner { return newRunner(runnerConfig{maxInterval: time.Hour, clock: clk}, nil) }
			h := &health{reconcile: idle(), reload: idle()}
			r := h.reconcile
			if name == "reload" {
				r = h.reload
			}
			r.busySince.Store(clk.Now().Add(-passHung - time.Second).UnixNano())
			err := h.liveness(context.Background())
			if err == nil || !strings.Contains(err.Error(), name+" pass running for") {
				t.Fatalf("liveness() = %v, want a hung %s pass", err, name)
			}
		})
	}
}
