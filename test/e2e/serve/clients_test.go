package serve

import (
	"bytes"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Clients in this file: a noisy pod on 127.0.0.21 looks up an outside name through an `ndots:5` search path
// (every expansion NXDOMAIN) at about 200 q/s; a quiet pod on 127.0.0.22 asks one cluster name a second.
const (
	noisyPod = "127.0.0.21"
	quietPod = "127.0.0.22"
)

// searchPath is a pod's resolv.conf search list in namespace default.
var searchPath = []string{"default.svc.cluster.local.", "svc.cluster.local.", "cluster.local."}

// nxUpstream is kube-dns for the test: NXDOMAIN for every name under example.com (its search expansions
// included), an A record for the rest.
func nxUpstream(t *testing.T, addr string) {
	testenv.ServeDNS(t, addr, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if strings.Contains(r.Question[0].Name, "example.com.") {
			m.Rcode = dns.RcodeNameError
		} else if r.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
				A: net.IPv4(10, 0, 0, 53)})
		}
		w.WriteMsg(m)
	}))
}

// pod sends queries from its own address until stop is closed: each lookup of names asks every search
// expansion, then the name itself, as glibc does with ndots:5 for a name of fewer dots.
func pod(t *testing.T, from string, every time.Duration, names []string, search bool, stop chan struct{}, wg *sync.WaitGroup) {
	c := &dns.Client{Timeout: time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}}}
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			name := dns.Fqdn(names[i%len(names)])
			var qs []string
			if search {
				for _, s := range searchPath {
					qs = append(qs, name+s)
				}
			}
			for _, q := range append(qs, name) {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				m := new(dns.Msg)
				m.SetQuestion(q, dns.TypeA)
				c.Exchange(m, listen) // an error (a timeout on a starved machine) is only a query less
			}
		}
	})
}

// The done-when of issue 41 on one machine: a pod sending about 200 q/s of NXDOMAIN through search expansion
// is at the top of `nodelocaldns -top` by address, with its NXDOMAIN share and names; a quiet pod is below it;
// the live table shows it too, and one log line names it.
func TestTopShowsTheNoisyPod(t *testing.T) {
	testenv.RequireRoot(t)
	nxUpstream(t, "127.0.0.53:53")
	dir := t.TempDir()
	sock := filepath.Join(dir, "health.sock")
	vol := harness.NewConfigMapVolume(t, filepath.Join(dir, "kube-dns"), map[string]string{"upstreamNameservers": `["127.0.0.53"]`})
	a := harness.Start(t, harness.Config{
		Dir:          dir,
		BaseCorefile: harness.StandardCorefile("127.0.0.10", "", "cluster.local"),
		Args: []string{"-localip", "127.0.0.10", "-setupinterface=false", "-setupiptables=false",
			"-upstreamsvc", "kube-dns-upstream", "-kubednscm", vol.Dir, "-health-socket", sock},
		Env: []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=127.0.0.53"},
	})
	a.WaitReady()
	bin := harness.Binary(t)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	pod(t, noisyPod, 5*time.Millisecond, []string{"api.example.com", "www.example.com", "cdn.example.com"}, true, stop, &wg)
	pod(t, quietPod, time.Second, []string{"kubernetes.default.svc.cluster.local"}, false, stop, &wg)
	t.Cleanup(func() { close(stop); wg.Wait() })

	var snap clients.Snapshot
	testenv.Eventually(t, 20*time.Second, "the noisy pod first in -top -json, with its NXDOMAIN rate", func() bool {
		out, code := harness.RunBinary(t, bin, "-top", "-json", "-health-socket", sock)
		if code != 0 {
			t.Logf("-top -json: exit %d: %s", code, out)
			return false
		}
		snap = clients.Snapshot{}
		if err := json.Unmarshal([]byte(out), &snap); err != nil {
			t.Fatalf("-top -json: %v: %s", err, out)
		}
		return len(snap.Clients) >= 2 && snap.Clients[0].Addr == noisyPod && snap.Clients[0].NXRate > 50
	})
	noisy := snap.Clients[0]
	if noisy.NXDomain*10 < noisy.Answers*9 || len(noisy.TopNames) == 0 || !strings.Contains(noisy.TopNames[0].Name, "example.com.") {
		t.Errorf("noisy pod %+v: want nearly all NXDOMAIN, its top names under example.com", noisy)
	}
	for _, c := range snap.Clients[1:] {
		if c.Addr == quietPod && c.Rate >= noisy.Rate/10 {
			t.Errorf("quiet pod at %v q/s beside the noisy one's %v", c.Rate, noisy.Rate)
		}
	}

	// The live table, as `kubectl exec` shows it: refreshed until an interrupt ends it cleanly.
	out := &lockedBuffer{}
	cmd := exec.Command(bin, "-top", "-health-socket", sock)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "two screens of -top, the noisy pod first in the last", func() bool {
		text := out.String()
		i := strings.LastIndex(text, "CLIENT")
		if strings.Count(text, "nodelocaldns -top") < 2 || i < 0 {
			return false
		}
		rows := strings.SplitN(text[i:], "\n", 3)
		return len(rows) == 3 && strings.Contains(rows[1], noisyPod) && strings.Contains(rows[1], "%")
	})
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("-top after an interrupt: %v\n%s", err, out.String())
	}

	l := a.WaitLog(10*time.Second, "the noisy pod's log line", func(l harness.LogLine) bool {
		return l.Msg == "client crossed a threshold" && l.Raw["client"] == noisyPod
	})
	if l.Raw["crossed"] != "nxdomain share" {
		t.Errorf("log line %v: want it to name the NXDOMAIN share", l.Raw)
	}
	for _, l := range a.Lines() {
		if l.Msg == "client crossed a threshold" && l.Raw["client"] == quietPod {
			t.Errorf("the quiet pod was logged: %v", l.Raw)
		}
	}
}

// lockedBuffer is a bytes.Buffer a process writes to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
