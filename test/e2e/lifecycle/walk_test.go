package lifecycle

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const reloaded = `nodelocaldns_corefile_reloads_total{result="reloaded"}`

// TestStartServeReloadSurgeStop walks one agent's life in order, with no load and no timing claim, so that it is
// short enough for a race-built binary (`make test-race`) yet passes through every phase: start, serve, a
// Corefile reload, a surge (a second instance beside the first, then the first stopped) and a graceful stop. Each
// phase checks that a pod's queries to the link-local IP and the ClusterIP are answered by an agent, and asks
// /health and /ready as the kubelet does.
func TestStartServeReloadSurgeStop(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNode(t)
	base := harness.NewConfigMapVolume(t, filepath.Join(t.TempDir(), "node-local-dns"),
		map[string]string{"Corefile.base": harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local")})
	// start asks /health from the moment the agent starts until it answers 200, as a kubelet probing early would.
	start := func() *harness.Agent {
		a := n.startCorefile(harness.LocalIP+","+harness.ClusterIP, "", "-basecorefile", filepath.Join(base.Dir, "Corefile.base"))
		testenv.Eventually(t, 30*time.Second, "/health answers 200", func() bool { c, _ := probe(healthURL); return c == 200 })
		a.WaitReady()
		return a
	}
	stop := func(a *harness.Agent) {
		t.Helper()
		if code := a.Stop(stopTimeout); code != 0 {
			t.Fatalf("agent exited with %d after SIGTERM", code)
		}
	}

	a := start()
	n.requireServed("start")

	was, _ := a.Metric(reloaded)
	edited := strings.Replace(harness.StandardCorefile(harness.LocalIP, harness.ClusterIP, "cluster.local"), "denial 9984 5", "denial 9984 6", 1)
	if !strings.Contains(edited, "denial 9984 6") {
		t.Fatal("the standard Corefile no longer has the line this test edits")
	}
	base.Update(t, map[string]string{"Corefile.base": edited})
	testenv.Eventually(t, 10*time.Second, "a reload of the edited Corefile.base", func() bool {
		v, _ := a.Metric(reloaded)
		return v > was
	})
	n.requireServed("reload")

	b := start()
	n.requireServed("surge: both instances")
	stop(a)
	n.requireServed("surge: the new instance alone")

	stop(b)
	requireNothingLeft(t)
}

// requireServed asks both listen addresses once from the pod and the probes once, and fails unless an agent
// answered each query and both probes say 200.
func (n *node) requireServed(phase string) {
	n.t.Helper()
	for _, url := range []string{healthURL, readyURL} {
		if code, body := probe(url); code != 200 {
			n.t.Fatalf("%s: %s = %d %q, want 200", phase, url, code, body)
		}
	}
	for _, target := range []string{harness.LocalIP, harness.ClusterIP} {
		var conn *net.UDPConn
		var err error
		n.Pod.Do(n.t, func() { conn, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(target), Port: 53}) })
		if err != nil {
			n.t.Fatalf("%s: dial %s from the pod: %v", phase, target, err)
		}
		answer, err := query(conn, "walk.default.svc.cluster.local.")
		conn.Close()
		if err != nil || answer != harness.AnswerAgent {
			n.t.Fatalf("%s: a pod's query to %s: answer %q, error %v; want %s from the agent", phase, target, answer, err, harness.AnswerAgent)
		}
	}
}
