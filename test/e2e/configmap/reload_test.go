package configmap

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// An update of the node-local-dns ConfigMap (the directory of -basecorefile) re-renders with the latest kube-dns
// ConfigMap and applies: here the first block's zone moves from cluster.local to corp.internal.
func TestBaseCorefileUpdate(t *testing.T) {
	e := start(t, setup{kubeDNS: map[string]string{
		"upstreamNameservers": upstreams(upX),
		"stubDomains":         stubs(map[string][]string{"acme.local": {stubA}}),
	}})
	e.expectAnswer("corp.internal", ansUpX)
	e.expectAnswer("svc."+domain, ansCluster)

	t0 := time.Now()
	e.base.Update(t, map[string]string{"Corefile.base": harness.StandardCorefile(localIP, dnsServer, "corp.internal")})
	t.Logf("Corefile.base changed: answered after %v", e.waitAnswer(t0, "corp.internal", ansCluster))
	e.expectAnswer("svc."+domain, ansUpX)
	e.expectAnswer("acme.local", ansStubA) // the kube-dns ConfigMap still applies
}

// A burst of 20 updates in quick succession ends in the last one, through few reloads: the reload runner's channel
// of one coalesces them (the watcher reports each real change, without a debounce).
func TestBurstOfUpdatesCoalesces(t *testing.T) {
	const n = 20
	e := start(t, setup{kubeDNS: map[string]string{"upstreamNameservers": upstreams(upX)}})
	before := e.metric(reloadsOK)
	var t0 time.Time
	for i := range n {
		t0 = e.updateKubeDNS(map[string]string{
			"upstreamNameservers": upstreams(upX),
			"stubDomains":         stubs(map[string][]string{fmt.Sprintf("burst%d.local", i): {stubA}}),
		})
	}
	t.Logf("burst of %d updates: the last answered %v after it was written", n, e.waitAnswer(t0, fmt.Sprintf("burst%d.local", n-1), ansStubA))
	e.expectAnswer(fmt.Sprintf("burst%d.local", n-2), ansUpX)
	// Barrier instead of a sleep: passes run one at a time, so once a SIGUSR1 pass sent now has counted itself
	// (as unchanged: the last content already serves), every pass of the burst has counted itself too.
	same := e.metric(reloadsSame)
	e.agent.Signal(syscall.SIGUSR1)
	e.waitMetric(reloadsSame, same)
	reloads := e.metric(reloadsOK) - before
	t.Logf("%d updates -> %v reloads", n, reloads)
	// Each update is a real change, so without coalescing there would be n reloads; the runner folds the
	// updates that arrive during a reload into the next one. How many fold depends on how long a reload takes
	// next to a write, which the machine's load changes (idle: 3-6 reloads; with the rest of `make test`
	// beside it: 10-12), so the claim checked is the mechanism's, not a ratio: fewer reloads than updates.
	if reloads < 1 || reloads >= n {
		t.Errorf("%d quick updates caused %v reloads, want 1..%d", n, reloads, n-1)
	}
}

// Queries sent continuously during 20 reloads (4 UDP clients and 1 TCP client, each query with queryTimeout,
// cluster, stub and "." names) all get a right answer (TCP after at most one retry), and the liveness probe keeps
// answering 200. The standard
// Corefile's `reload` and `health` directives are present throughout: each change reloads exactly once.
func TestNoFailureDuringReloads(t *testing.T) {
	const changes = 20
	stub := func(server string) map[string]string {
		return map[string]string{
			"upstreamNameservers": upstreams(upX),
			"stubDomains":         stubs(map[string][]string{"acme.local": {server}}),
		}
	}
	e := start(t, setup{kubeDNS: stub(stubA)})
	reloadsBefore, logsBefore := e.metric(reloadsOK), len(e.agent.Lines())

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() }) // also when a wait below fails the test
	var (
		queries, failures atomic.Int64
		probes            atomic.Int64
		tcpRetries        atomic.Int64
		mu                sync.Mutex
		firstFailures     []string
	)
	fail := func(format string, args ...any) {
		failures.Add(1)
		mu.Lock()
		if len(firstFailures) < 10 {
			firstFailures = append(firstFailures, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	zones := []struct{ zone, want1, want2 string }{
		{"svc." + domain, ansCluster, ansCluster}, // forward with force_tcp to kube-dns-upstream
		{"acme.local", ansStubA, ansStubB},        // the stub moving between A and B
		{"example.org", ansUpX, ansUpX},           // the . block
	}
	client := func(netw string, id int) {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			z := zones[i%len(zones)]
			name := fmt.Sprintf("%s%d-%d.%s", netw, id, i, z.zone)
			got, err := harness.Lookup(dnsAddr, netw, name, queryTimeout)
			queries.Add(1)
			if netw == "tcp" && err != nil {
				// Known limitation (reported): a TCP connection the old instance accepted in the instant before
				// it stops is closed unanswered (CoreDNS's graceful stop sets a past read deadline on open
				// connections). Stub resolvers retry; so do we, once, and count it.
				tcpRetries.Add(1)
				got, err = harness.Lookup(dnsAddr, netw, name, queryTimeout)
			}
			if err != nil || (got != z.want1 && got != z.want2) {
				fail("%s %s: %q, %v", netw, name, got, err)
			}
		}
	}
	for id := range 4 {
		wg.Add(1)
		go client("udp", id)
	}
	wg.Add(1)
	go client("tcp", 0)
	wg.Add(1)
	go func() { // the kubelet's liveness probe, much more often than its default 10 s
		defer wg.Done()
		c := &http.Client{Timeout: queryTimeout} // a probe lost or refused fails; a starved agent's slow one does not
		for ctx.Err() == nil {
			if err := health(c); err != nil {
				fail("liveness probe: %v", err)
			}
			probes.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// Each change waits, after its answer, until traffic of its own has completed since it was written: the
	// swap happened in that span, so queries and probes were in flight across it. A count of what came in a fixed
	// time would depend on the machine's speed (a busy one probes less often); this does not. The bound only
	// catches traffic that stopped altogether.
	const queriesPerChange, probesPerChange = 10, 2
	var worst time.Duration
	for i := range changes {
		server, want := stubB, ansStubB
		if i%2 == 1 {
			server, want = stubA, ansStubA
		}
		q0, p0 := queries.Load(), probes.Load()
		t0 := e.updateKubeDNS(stub(server))
		worst = max(worst, e.waitAnswer(t0, "acme.local", want))
		testenv.Eventually(t, trafficTimeout, fmt.Sprintf("%d queries and %d liveness probes across change %d", queriesPerChange, probesPerChange, i),
			func() bool { return queries.Load()-q0 >= queriesPerChange && probes.Load()-p0 >= probesPerChange })
	}
	stop()
	wg.Wait()

	t.Logf("%d reloads: %d queries, %d liveness probes, %d failures, %d TCP queries retried; slowest change answered after %v",
		changes, queries.Load(), probes.Load(), failures.Load(), tcpRetries.Load(), worst)
	if failures.Load() > 0 {
		t.Errorf("%d failures during reloads, first ones:\n%v", failures.Load(), firstFailures)
	}
	// The retried TCP failures are the known limitation above: at most the one connection open as each old
	// instance stops, so no more than one per reload. More would be a failure the retry hides.
	if r := tcpRetries.Load(); r > changes {
		t.Errorf("%d TCP queries needed a retry over %d reloads, want at most one per reload", r, changes)
	}
	// One reload per change: neither the `reload` directive nor a second event doubled any. The counter moves
	// once the reload's pass is done (reload.go: the Corefile written, the reload's hook run), which can be after
	// the new configuration answers: on a starved machine the last change's count came after the traffic above.
	testenv.Eventually(t, trafficTimeout, "the reload counter to count the last change",
		func() bool { return e.metric(reloadsOK)-reloadsBefore >= changes })
	if got := e.metric(reloadsOK) - reloadsBefore; got != changes {
		t.Errorf("%d changes caused %v reloads, want exactly %d", changes, got, changes)
	}
	if got := len(e.logsSince(logsBefore, "Reloading complete")); got != changes {
		t.Errorf("coredns logged %d completed reloads for %d changes", got, changes)
	}
}

// With -reloadwithsignal (node-cache's way to reload without the reload plugin), SIGUSR1 runs the same in-process
// reload pass: nothing changed, so it reloads nothing and says so. A real change still applies without a signal.
func TestReloadWithSignal(t *testing.T) {
	e := start(t, setup{args: []string{"-reloadwithsignal"}, kubeDNS: map[string]string{"upstreamNameservers": upstreams(upX)}})
	before, reloadedBefore := e.metric(reloadsSame), e.metric(reloadsOK)
	logsBefore := len(e.agent.Lines())
	e.agent.Signal(syscall.SIGUSR1)
	e.waitMetric(reloadsSame, before)
	if got := e.metric(reloadsOK); got != reloadedBefore {
		t.Errorf("SIGUSR1 without a change reloaded coredns: %s %v -> %v", reloadsOK, reloadedBefore, got)
	}
	if n := len(e.logsSince(logsBefore, "Reloading")); n != 0 {
		t.Errorf("SIGUSR1 without a change restarted coredns %d times", n)
	}
	e.agent.WaitLog(time.Second, "the sigusr1 trigger", func(l harness.LogLine) bool {
		tr, _ := l.Raw["triggers"].([]any)
		return len(tr) == 1 && tr[0] == "sigusr1"
	})
	e.expectAnswer("example.org", ansUpX)

	t0 := e.updateKubeDNS(map[string]string{"upstreamNameservers": upstreams(upY)})
	t.Logf("change with -reloadwithsignal: answered after %v", e.waitAnswer(t0, "example.org", ansUpY))
	if got := e.metric(reloadsError); got != 0 {
		t.Errorf("%s = %v", reloadsError, got)
	}
}

// The operator's `reload` directive stays valid and does nothing: with its shortest interval (2 s, jitter 1 s)
// and a change made, nothing reloads a second time over the next few intervals, and every block keeps serving
// (upstream's plugin, embedded, would reload into CoreDNS's default Corefile and drop them all).
func TestReloadDirectiveIsHarmless(t *testing.T) {
	e := start(t, setup{
		kubeDNS:  map[string]string{"upstreamNameservers": upstreams(upX)},
		baseEdit: func(s string) string { return strings.ReplaceAll(s, "    reload\n", "    reload 2s 1s\n") },
	})
	if cf := e.corefile(); strings.Count(cf, "reload 2s 1s") != 4 {
		t.Fatalf("want the reload directive with a 2 s interval in all four blocks:\n%s", cf)
	}
	reloadsBefore, logsBefore := e.metric(reloadsOK), len(e.agent.Lines())
	t0 := e.updateKubeDNS(map[string]string{"upstreamNameservers": upstreams(upY)})
	e.waitAnswer(t0, "example.org", ansUpY)
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		e.expectAnswer("example.org", ansUpY)
		e.expectAnswer("svc."+domain, ansCluster)
	}
	if got := e.metric(reloadsOK) - reloadsBefore; got != 1 {
		t.Errorf("one change caused %v reloads", got)
	}
	if got := len(e.logsSince(logsBefore, "Reloading")); got != 1 {
		t.Errorf("coredns restarted %d times for one change", got)
	}
}
