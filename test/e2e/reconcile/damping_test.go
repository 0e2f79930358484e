package reconcile

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// A writer that keeps deleting our address (a second manager of the interface, a script) must not make the
// agent spin at its minimum pass interval: after a few repairs in a row the passes are damped, the damping is
// counted and said once, and when the writer stops the address is back within the cap.
func TestRepairsFoughtOverAreDamped(t *testing.T) {
	a := StartAgent(t)
	const fight = 3 * time.Second
	before := passCount(t, a)

	ctx, cancel := context.WithTimeout(context.Background(), fight)
	defer cancel()
	deletes := 0
	for ctx.Err() == nil {
		// Deleting an address that is already gone fails; only successful deletes are undone repairs.
		if exec.Command("ip", "addr", "del", LocalIP+"/32", "dev", LinkName).Run() == nil {
			deletes++
		}
		time.Sleep(2 * time.Millisecond)
	}
	passes := passCount(t, a) - before
	damped, _ := a.Metric("nodelocaldns_reconcile_damped_total")
	t.Logf("%v of deleting %s: %d deletes took effect, %v passes, %v damped", fight, LocalIP, deletes, passes, damped)
	if damped < 1 {
		t.Errorf("no pass was damped")
	}
	// Undamped, the agent repairs every delete at its 5 ms floor: up to 600 passes in 3 s. Damped, the waits
	// grow 50, 100, 200 ms ... to 5 s after the fifth repair in a row.
	if passes > 40 {
		t.Errorf("%v passes in %v of fighting, want at most 40", passes, fight)
	}
	warned := 0
	for _, l := range a.Lines() {
		if l.Msg == "another writer keeps undoing our repairs; damping reconcile passes until it stops" {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("the damping warning was logged %d times, want once", warned)
	}
	// The writer stopped: the next damped pass (at most 5 s away) repairs the address.
	testenv.Eventually(t, 10*time.Second, LocalIP+" back on "+LinkName, func() bool {
		out, err := exec.Command("ip", "-o", "addr", "show", "dev", LinkName).Output()
		return err == nil && strings.Contains(string(out), " "+LocalIP+"/32 ")
	})
}

func passCount(t *testing.T, a *harness.Agent) float64 {
	t.Helper()
	v, _ := a.Metric(passCountMetric)
	return v
}
