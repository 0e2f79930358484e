package upstream

import (
	"testing"
	"time"
)

// TestRollout: under 200 misses/s, each of the three pods in turn is rolled gracefully: it leaves the endpoints,
// keeps answering for a lameduck, stops (its connections closed), comes back and rejoins. No query fails
// through the cache.
func TestRollout(t *testing.T) {
	const (
		rate     = 200
		lameduck = 3 * time.Second
	)
	c := newCluster(t)
	c.startAgent()
	stop := make(chan struct{})
	cached := startLoad("c", localIP+":53", rate, stop)
	control := startLoad("n", clusterIP+":53", rate, stop)
	time.Sleep(time.Second)
	for i := range c.pods {
		var others []int
		for j := range c.pods {
			if j != i {
				others = append(others, j)
			}
		}
		c.endpoints(others...)
		time.Sleep(lameduck)
		c.pods[i].stop()
		time.Sleep(500 * time.Millisecond)
		c.pods[i].start(t)
		c.endpoints(0, 1, 2)
		time.Sleep(time.Second)
	}
	close(stop)
	cs, ns := summarize(cached.wait()), summarize(control.wait())
	t.Logf("cache %v; control %v", cs, ns)
	if cs.failed != 0 {
		t.Errorf("%d queries failed through the cache during the rollout, want 0", cs.failed)
	}
}
