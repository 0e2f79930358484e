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

// testPodFailure runs the load warm long (0: none), fails pod 1, takes it out of the endpoints 5 s later, and
// judges the window from the failure to 3 s after that.
func testPodFailure(t *testing.T, fail func(*cluster), warm time.Duration) {
	const (
		rate  = 200
		dead  = 5 * time.Second
		after = 3 * time.Second
	)
	for r := range repeats() {
		t.Run(fmt.Sprintf("repeat%d", r), func(t *testing.T) {
			c := newCluster(t)
			c.startAgent()
			stop := make(chan struct{})
			cached := startLoad("c", localIP+":53", rate, stop)
			control := startLoad("n", clusterIP+":53", rate, stop)
			time.Sleep(2 * time.Second) // warm: connections open, round trips seen
			t0 := time.Now()
			c.silence(1, true)
			time.Sleep(dead)
			c.endpoints(0, 2)
			time.Sleep(after)
			t1 := time.Now()
			close(stop)
			cs := summarize(inWindow(cached.wait(), t0, t1))
			ns := summarize(inWindow(control.wait(), t0, t1))
			t.Logf("repeat %d: cache %v; control %v", r, cs, ns)
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
