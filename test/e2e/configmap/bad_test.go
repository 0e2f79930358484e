package configmap

import (
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Bad updates are refused: the running configuration keeps answering, the refusal is logged naming the file and
// counted as a configmap setup error, and a later good update applies normally.
func TestBadUpdateKeepsServing(t *testing.T) {
	good := map[string]string{
		"upstreamNameservers": upstreams(upX),
		"stubDomains":         stubs(map[string][]string{"acme.local": {stubA}}),
	}
	e := start(t, setup{kubeDNS: good})
	e.expectAnswer("acme.local", ansStubA)

	for _, tc := range []struct {
		name, key, value, inLog string
	}{
		{"bad JSON", "stubDomains", `{"acme.local": ["127.0.0.56"]`, "invalid JSON"},
		// A value that would close the block and open a new server block serving whoami, were it pasted into the
		// Corefile the way node-cache does.
		{"injection", "stubDomains", `{"a.com": ["1.1.1.1 }\n. {\n whoami"]}`, "a.com"},
		{"invalid domain", "stubDomains", `{"-bad-.local": ["127.0.0.56"]}`, "-bad-.local"},
		{"bad upstream", "upstreamNameservers", `["` + ip(upY) + `", "not an address"]`, "not an address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := map[string]string{"upstreamNameservers": good["upstreamNameservers"], "stubDomains": good["stubDomains"]}
			data[tc.key] = tc.value
			errsBefore, reloadsBefore := e.metric(configmapErrors), e.metric(reloadsOK)
			logsBefore := len(e.agent.Lines())
			e.updateKubeDNS(data)
			e.waitMetric(configmapErrors, errsBefore)

			e.expectAnswer("acme.local", ansStubA)
			e.expectAnswer("example.org", ansUpX)
			e.expectAnswer("kubernetes.default.svc."+domain, ansCluster)
			if got := e.metric(reloadsOK); got != reloadsBefore {
				t.Errorf("%s: %v -> %v after a refused update", reloadsOK, reloadsBefore, got)
			}
			refused := e.logsSince(logsBefore, "kube-dns configmap refused; keeping the last one accepted until it is fixed")
			if len(refused) != 1 {
				t.Fatalf("want one refusal logged, got %d", len(refused))
			}
			msg, _ := refused[0].Raw["error"].(string)
			if !strings.Contains(msg, e.kdDir+"/"+tc.key) || !strings.Contains(msg, tc.inLog) {
				t.Errorf("the refusal should name %s/%s and %q; it says %q", e.kdDir, tc.key, tc.inLog, msg)
			}
			if cf := e.corefile(); strings.Contains(cf, "whoami") || strings.Contains(cf, ip(upY)) {
				t.Errorf("the refused update reached the written Corefile:\n%s", cf)
			}
		})
	}

	t0 := e.updateKubeDNS(map[string]string{
		"upstreamNameservers": upstreams(upY),
		"stubDomains":         stubs(map[string][]string{"acme.local": {stubB}}),
	})
	t.Logf("good update after bad ones: answered after %v", e.waitAnswer(t0, "acme.local", ansStubB))
	e.expectAnswer("example.org", ansUpY)
}

// A kube-dns ConfigMap that is already bad when the agent starts is reported and counted; the agent serves
// without it (as node-cache does) and, unlike node-cache, applies the first good version that follows.
func TestFixAfterBadStartup(t *testing.T) {
	e := start(t, setup{kubeDNS: map[string]string{
		"upstreamNameservers": upstreams(upX),
		"stubDomains":         `{"acme.local": [`,
	}})
	if got := e.metric(configmapErrors); got < 1 {
		t.Errorf("%s = %v after a bad start-up, want >= 1", configmapErrors, got)
	}
	e.agent.WaitLog(time.Second, "the refused kube-dns configmap", func(l harness.LogLine) bool {
		msg, _ := l.Raw["error"].(string)
		return l.Level == "error" && strings.Contains(msg, e.kdDir+"/stubDomains")
	})
	// The whole ConfigMap is refused, its valid upstreamNameservers too: /etc/resolv.conf serves ".".
	if cf := e.corefile(); strings.Contains(cf, "acme.local") || !strings.Contains(cf, "forward . /etc/resolv.conf") {
		t.Errorf("a bad start-up ConfigMap should render as no ConfigMap:\n%s", cf)
	}
	e.expectAnswer("kubernetes.default.svc."+domain, ansCluster)

	t0 := e.updateKubeDNS(map[string]string{
		"upstreamNameservers": upstreams(upX),
		"stubDomains":         stubs(map[string][]string{"acme.local": {stubA}}),
	})
	t.Logf("fixed ConfigMap: stub answered after %v", e.waitAnswer(t0, "acme.local", ansStubA))
	e.expectAnswer("example.org", ansUpX)
}

// While the kube-dns ConfigMap is bad, an update of Corefile.base still applies, rendered with the last kube-dns
// ConfigMap accepted (here: none, since it was bad from the start).
func TestBaseUpdateWhileKubeDNSIsBad(t *testing.T) {
	e := start(t, setup{kubeDNS: map[string]string{"stubDomains": `{"acme.local": [`}})
	if got := e.metric(configmapErrors); got < 1 {
		t.Errorf("%s = %v after a bad start-up, want >= 1", configmapErrors, got)
	}
	t0 := time.Now()
	e.base.Update(t, map[string]string{"Corefile.base": harness.StandardCorefile(localIP, dnsServer, "corp.internal")})
	t.Logf("Corefile.base changed while kube-dns is bad: answered after %v", e.waitAnswer(t0, "corp.internal", ansCluster))
	if cf := e.corefile(); strings.Contains(cf, "acme.local") {
		t.Errorf("the refused kube-dns ConfigMap leaked into the Corefile:\n%s", cf)
	}
}
