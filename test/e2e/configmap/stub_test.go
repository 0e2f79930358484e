package configmap

import (
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// A stub domain added, moved to another server, and removed reaches the answers, each within applyTimeout; the
// times are logged (the bench measures them properly).
func TestStubDomainAddChangeRemove(t *testing.T) {
	e := start(t, setup{kubeDNS: map[string]string{"upstreamNameservers": upstreams(upX)}})
	e.expectAnswer("acme.local", ansUpX) // no stub yet: the "." block's upstream answers

	t0 := e.updateKubeDNS(map[string]string{
		"upstreamNameservers": upstreams(upX),
		"stubDomains":         stubs(map[string][]string{"acme.local": {stubA}}),
	})
	t.Logf("stub domain added: answered after %v", e.waitAnswer(t0, "acme.local", ansStubA))
	e.expectAnswer("example.org", ansUpX)
	e.expectAnswer("kubernetes.default.svc."+domain, ansCluster)

	t0 = e.updateKubeDNS(map[string]string{
		"upstreamNameservers": upstreams(upX),
		"stubDomains":         stubs(map[string][]string{"acme.local": {stubB}}),
	})
	t.Logf("stub domain changed: answered after %v", e.waitAnswer(t0, "acme.local", ansStubB))

	t0 = e.updateKubeDNS(map[string]string{"upstreamNameservers": upstreams(upX)})
	t.Logf("stub domain removed: answered after %v", e.waitAnswer(t0, "acme.local", ansUpX))
	// The Corefile for operators is written just after the reload succeeded.
	testenv.Eventually(t, applyTimeout, "the written Corefile to drop acme.local", func() bool {
		return !strings.Contains(e.corefile(), "acme.local")
	})
}

// upstreamNameservers added, changed and removed reach the "." block's answers. Removed, the agent falls back to
// /etc/resolv.conf (node-cache's default), which names none of our servers.
func TestUpstreamNameserversAddChangeRemove(t *testing.T) {
	e := start(t, setup{})
	if cf := e.corefile(); !strings.Contains(cf, "forward . /etc/resolv.conf") {
		t.Fatalf("without upstreamNameservers the . block should forward to /etc/resolv.conf:\n%s", cf)
	}

	t0 := e.updateKubeDNS(map[string]string{"upstreamNameservers": upstreams(upX)})
	t.Logf("upstreamNameservers added: answered after %v", e.waitAnswer(t0, "example.org", ansUpX))

	t0 = e.updateKubeDNS(map[string]string{"upstreamNameservers": upstreams(upY)})
	t.Logf("upstreamNameservers changed: answered after %v", e.waitAnswer(t0, "example.org", ansUpY))
	e.expectAnswer("kubernetes.default.svc."+domain, ansCluster)

	t0 = e.updateKubeDNS(map[string]string{})
	testenv.Eventually(t, applyTimeout, "the . block to forward to /etc/resolv.conf again", func() bool {
		return strings.Contains(e.corefile(), "forward . /etc/resolv.conf")
	})
	t.Logf("upstreamNameservers removed: Corefile rendered after %v", time.Since(t0))
	// The Corefile is written after the reload succeeded, so the new . block serves now: Y gets no more queries.
	before := e.ups[upY].Queries.Load()
	got, err := e.lookup("example.org")
	if got == ansUpY || e.ups[upY].Queries.Load() != before {
		t.Errorf("after removing upstreamNameservers, a query still reached %s (answer %q, %v)", upY, got, err)
	}
}

// A kube-dns ConfigMap directory that does not exist at start-up (the manifest mounts it `optional: true`) is
// picked up when it appears.
func TestKubeDNSDirectoryAppearsLater(t *testing.T) {
	e := start(t, setup{noKubeDNS: true})
	e.expectAnswer("kubernetes.default.svc."+domain, ansCluster)
	t0 := time.Now()
	e.kubeDNS = harness.NewConfigMapVolume(t, e.kdDir, map[string]string{"stubDomains": stubs(map[string][]string{"acme.local": {stubA}})})
	t.Logf("directory created: stub answered after %v", e.waitAnswer(t0, "acme.local", ansStubA))
}
