package upstream

import (
	"fmt"
	"testing"
	"time"
)

// TestDeadPod: under 200 misses/s, a kube-dns pod drops everything (a dead node: no answer, no reset) for 5 s,
// then leaves the endpoints. Through the cache no more queries fail than from the no-cache control beside it,
// at most 1% of those sent in the window, and the p99 is at most 200 ms.
func TestDeadPod(t *testing.T) {
	testPodFailure(t, func(c *cluster) { c.silence(1, true) }, 2*time.Second)
}

// TestDeadPodFromStart: the same with the pod dead before the agent's first miss, so that its first dials (with
// no round trip seen yet) meet it: CoreDNS's adaptive dial timeout starts at 30 s there.
func TestDeadPodFromStart(t *testing.T) {
	testPodFailure(t, func(c *cluster) { c.silence(1, true) }, 0)
}

// TestCrashedPod: the same with a pod whose process is gone while its node lives: its sockets are closed (its
// connections end, a new one is refused, a datagram gets a port unreachable) for 5 s before it leaves the
// endpoints.
func TestCrashedPod(t *testing.T) {
	testPodFailure(t, func(c *cluster) { c.pods[1].stop() }, 2*time.Second)
}

// testPodFailure runs the load warm long (0: none, the pod fails before the agent's first miss), fails pod 1,
// takes it out of the endpoints 5 s after the failure, and judges the window from the failure to 3 s after that.
// $NLD_UPSTREAM_REPEATS repeats it (the bar is 20 repeats with no outlier): each repeat is judged on its
// own, and the last line gives the worst of them.
func testPodFailure(t *testing.T, fail func(*cluster), warm time.Duration) {
	const (
		rate  = 200
		dead  = 5 * time.Second
		after = 3 * time.Second
	)
	var worst struct {
		failed, control int
		p99             time.Duration
	}
	n := repeats()
	for r := range n {
		t.Run(fmt.Sprintf("repeat%d", r), func(t *testing.T) {
			c := newCluster(t)
			c.startAgent()
			stop := make(chan struct{})
			var t0 time.Time
			if warm == 0 {
				t0 = time.Now()
				fail(c)
			}
			cached := startLoad("c", localIP+":53", rate, stop)
			control := startLoad("n", clusterIP+":53", rate, stop)
			if warm > 0 {
				time.Sleep(warm) // connections open, round trips seen
				t0 = time.Now()
				fail(c)
			}
			time.Sleep(dead - time.Since(t0))
			c.endpoints(0, 2)
			time.Sleep(after)
			t1 := time.Now()
			close(stop)
			cs := summarize(inWindow(cached.wait(), t0, t1))
			ns := summarize(inWindow(control.wait(), t0, t1))
			t.Logf("repeat %d: cache %v; control %v", r, cs, ns)
			worst.failed, worst.control, worst.p99 = max(worst.failed, cs.failed), max(worst.control, ns.failed), max(worst.p99, cs.p99)
			if cs.failed > ns.failed {
				t.Errorf("repeat %d: %d queries failed through the cache, more than the %d without it", r, cs.failed, ns.failed)
			}
			if cs.failed*100 > cs.sent {
				t.Errorf("repeat %d: %d of %d queries failed through the cache, want at most 1%%", r, cs.failed, cs.sent)
			}
			if cs.p99 > 200*time.Millisecond {
				t.Errorf("repeat %d: p99 through the cache %v, want at most 200ms (control %v)", r, cs.p99, ns.p99)
			}
			c.agent.Stop(10 * time.Second)
		})
	}
	t.Logf("%d repeats: through the cache at most %d failed, p99 at most %v; the control at most %d failed",
		n, worst.failed, worst.p99.Round(time.Millisecond), worst.control)
}

// inWindow keeps the queries sent in [from, to).
func inWindow(rs []result, from, to time.Time) []result {
	var out []result
	for _, r := range rs {
		if !r.sent.Before(from) && r.sent.Before(to) {
			out = append(out, r)
		}
	}
	return out
}
