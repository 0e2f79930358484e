package listeners

import (
	"syscall"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// TestProbesReachOwnPod: a surge runs two instances on one node, sharing every address and port. The old one is
// stopped (SIGSTOP: wedged, its sockets still in every SO_REUSEPORT group). The kubelet must kill the wedged pod and
// only it: the old pod's shipped liveness probe fails every time, and the new pod's never fails failureThreshold
// times in a row (a probe on a starved machine may time out once; the kubelet forgives that). With HTTP probes of
// the shared health address, about half of each pod's probes reached the other instance: at that rate 20 probes
// hold no run of two failures with a quarter of failures or fewer less than one time in a hundred.
func TestProbesReachOwnPod(t *testing.T) {
	testenv.RequireRoot(t)
	harness.NewNode(t)
	old := startPod(t)
	old.WaitReady()
	cur := startPod(t)
	cur.WaitReady()
	old.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { old.Signal(syscall.SIGCONT) })

	const probes = 20
	threshold := int(max(cur.ctr.LivenessProbe.FailureThreshold, 1))
	curFailed, run, longest, oldPassed := 0, 0, 0, 0
	for range probes {
		if err := cur.probe(cur.ctr.LivenessProbe); err != nil {
			curFailed++
			run++
			longest = max(longest, run)
			t.Logf("new pod's liveness probe: %v", err)
		} else {
			run = 0
		}
		if err := old.probe(old.ctr.LivenessProbe); err == nil {
			oldPassed++
		}
	}
	t.Logf("new (serving) pod: %d of %d liveness probes failed, at most %d in a row (failureThreshold %d); old (stopped) pod: %d of %d passed",
		curFailed, probes, longest, threshold, oldPassed, probes)
	if longest >= threshold || curFailed > probes/4 || oldPassed > 0 {
		t.Errorf("liveness probes crossed between the pods: the serving pod failed %d of %d (%d in a row, the kubelet kills at %d), the stopped one passed %d of %d; want at most %d failures, fewer than %d in a row, and 0 passed",
			curFailed, probes, longest, threshold, oldPassed, probes, probes/4, threshold)
	}
}
