package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// A reload to a loop that no server block states (cluster.local:53 forwards to a block on port 1053 that
// forwards back to port 53) passes the Corefile's own check and is found by the `loop` directive's probe: the
// previous configuration is put back and serves, where CoreDNS's loop plugin would exit the process. (A block
// forwarding to its own address is refused before it serves: the lifecycle matrix's reload case.)
func TestLoopFoundByProbeIsUndone(t *testing.T) {
	n := newNode(t)
	a := n.start()
	a.WaitReady()
	std := harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local")
	looping := strings.ReplaceAll(std, "__PILLAR__CLUSTER__DNS__", harness.LocalIP+":1053") +
		"cluster.local:1053 {\n    bind " + harness.LocalIP + "\n    forward . " + harness.LocalIP + ":53\n}\n"
	writeBase(t, a, looping)
	a.WaitLog(10*time.Second, "reload refused", func(l harness.LogLine) bool { return strings.HasPrefix(l.Msg, "reload refused") })
	const refused = `nodelocaldns_corefile_reloads_total{result="loop"}`
	testenv.Eventually(t, 10*time.Second, refused+" 1", func() bool { v, _ := a.Metric(refused); return v == 1 })
	if got, err := harness.Lookup(harness.LocalIP+":53", "udp", "after.cluster.local", 2*time.Second); err != nil || got != harness.AnswerAgent {
		t.Errorf("after the loop was undone: %q, %v; want the agent's %s", got, err, harness.AnswerAgent)
	}
}
