package listeners

import (
	"syscall"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// TestProbesReachOwnPod: a surge runs two instances on one node, sharing every address and port. The old one is
// stopped (SIGSTOP: wedged, its sockets still in every SO_REUSEPORT group). The new pod's shipped liveness probe
// must pass every time, and the old pod's must fail every time, so the kubelet kills the wedged pod and only it.
// With HTTP probes of the shared health address, about half of each pod's probes reached the other instance.
func TestProbesReachOwnPod(t *testing.T) {
	testenv.RequireRoot(t)
	harness.NewNode(t)
	old := startPod(t)
	old.WaitReady()
	cur := startPod(t)
	cur.WaitReady()
	old.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { old.Signal(syscall.SIGCONT) })

	const probes = 10
	curFailed, oldPassed := 0, 0
	for range probes {
		if err := cur.probe(cur.ctr.LivenessProbe); err != nil {
			curFailed++
			t.Logf("new pod's liveness probe: %v", err)
		}
		if err := old.probe(old.ctr.LivenessProbe); err == nil {
			oldPassed++
		}
	}
	t.Logf("new (serving) pod: %d of %d liveness probes failed; old (stopped) pod: %d of %d passed", curFailed, probes, oldPassed, probes)
	if curFailed > 0 || oldPassed > 0 {
		t.Errorf("liveness probes crossed between the pods: the serving pod failed %d of %d, the stopped one passed %d of %d; want 0 and 0",
			curFailed, probes, oldPassed, probes)
	}
}
