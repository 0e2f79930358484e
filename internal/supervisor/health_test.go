package supervisor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"
)

// /health fails while a reconcile or reload pass runs longer than passHung, whatever DNS does.
func TestLivenessFailsOnAHungPass(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	for _, name := range []string{"reconcile", "reload"} {
		t.Run(name, func(t *testing.T) {
			r := newRunner(runnerConfig{maxInterval: time.Hour, clock: clk}, nil)
			s := &Supervisor{log: zap.NewNop()}
			if name == "reconcile" {
				s.runner = r
			} else {
				s.reloads = r
			}
			r.busySince.Store(clk.Now().Add(-passHung - time.Second).UnixNano())
			err := s.liveness(context.Background())
			if err == nil || !strings.Contains(err.Error(), name+" pass running for") {
				t.Fatalf("liveness() = %v, want a hung %s pass", err, name)
			}
		})
	}
}
