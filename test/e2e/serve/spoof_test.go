package serve

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/memcheck"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// spoofed is the source range of TestSpoofedSources: the namespace's loopback takes every address of it as
// its own (a local route), so a socket can send from any of them.
const spoofed = "10.128.0.0/14"

// 100,000 spoofed sources, one query each, while the noisy pod keeps asking: the agent's table holds 1024 of
// them, the noisy pod stays first with an exact count, and the agent's peak RSS stays under the memory check's
// worst case for its Corefile (which counts the accounting at its bound).
func TestSpoofedSources(t *testing.T) {
	testenv.RequireRoot(t)
	if out, err := exec.Command("ip", "route", "add", "local", spoofed, "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip route add local %s: %v: %s", spoofed, err, out)
	}
	// The package's namespace outlives the test: a second run (-count) adds the route again.
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", "local", spoofed, "dev", "lo").Run() })
	nxUpstream(t, "127.0.0.53:53")
	dir := t.TempDir()
	sock := filepath.Join(dir, "health.sock")
	vol := harness.NewConfigMapVolume(t, filepath.Join(dir, "kube-dns"), map[string]string{"upstreamNameservers": `["127.0.0.53"]`})
	base := harness.StandardCorefile("127.0.0.10", "", "cluster.local")
	a := harness.Start(t, harness.Config{
		Dir: dir, BaseCorefile: base,
		Args: []string{"-localip", "127.0.0.10", "-setupinterface=false", "-setupiptables=false",
			"-upstreamsvc", "kube-dns-upstream", "-kubednscm", vol.Dir, "-health-socket", sock},
		Env: []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=127.0.0.53"},
	})
	a.WaitReady()
	before := status(t, a.Cmd.Process.Pid)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	pod(t, noisyPod, 5*time.Millisecond, []string{"api.example.com"}, true, stop, &wg)
	t.Cleanup(func() { close(stop); wg.Wait() })
	// The noisy pod is ahead before the spoofing starts. A table of MaxClients evicts its least counted entry,
	// and its smallest count never exceeds all answers over MaxClients (the counts add up to the answers): the
	// spoofed sources alone take it to sources/MaxClients, about 98. A pod counted past that before they arrive
	// can never be the least, whatever the machine's speed makes of the race between the pod and the spoofing;
	// one below it can be evicted when a starved pod falls behind, and re-enter with an overcount (a cold CI
	// run saw 23). A starved machine can start the pod late; it is asked to be ahead, not to be fast.
	const sources = 100_000
	testenv.Eventually(t, 60*time.Second, "the noisy pod counted past the spoofing's tail before it starts", func() bool {
		var s clients.Snapshot
		out, code := harness.RunBinary(t, harness.Binary(t), "-top", "-json", "-top-n", "1", "-health-socket", sock)
		return code == 0 && json.Unmarshal([]byte(out), &s) == nil && len(s.Clients) > 0 &&
			s.Clients[0].Addr == noisyPod && s.Clients[0].Answers > 2*sources/clients.MaxClients
	})

	prefix := netip.MustParsePrefix(spoofed)
	to := &unix.SockaddrInet4{Port: 53, Addr: [4]byte{127, 0, 0, 10}}
	hit := query(t, "kubernetes.default.svc.cluster.local.")
	src := prefix.Addr()
	for i := range sources {
		src = src.Next()
		q := hit
		if i%10 == 0 { // a miss of its own, answered NXDOMAIN by kube-dns: the handler's path
			q = query(t, fmt.Sprintf("s%d.example.com.", i))
		}
		sendFrom(t, src, to, q)
		if i%100 == 99 {
			time.Sleep(time.Millisecond) // paced, so that the sockets' buffers drop few of them
		}
	}

	var snap clients.Snapshot
	testenv.Eventually(t, 20*time.Second, "the table full of spoofed sources, the noisy pod first", func() bool {
		out, code := harness.RunBinary(t, harness.Binary(t), "-top", "-json", "-top-n", "3", "-health-socket", sock)
		if code != 0 || json.Unmarshal([]byte(out), &snap) != nil {
			t.Logf("-top -json: exit %d: %s", code, out)
			return false
		}
		// A starved machine may drop some datagrams before the agent reads them: a tenth is plenty to fill the table.
		return snap.Tracked == clients.MaxClients && snap.Answers >= sources/10 && len(snap.Clients) > 0 && snap.Clients[0].Addr == noisyPod
	})
	if c := snap.Clients[0]; c.Overcount != 0 || c.NXDomain != c.Answers {
		t.Errorf("noisy pod %+v: want exact (no overcount), every answer NXDOMAIN", c)
	}
	after := status(t, a.Cmd.Process.Pid)
	caches, err := memcheck.Caches([]byte(base), dnsserver.Directives())
	if err != nil {
		t.Fatal(err)
	}
	bound := memcheck.New(caches, 0).WorstCase
	t.Logf("%d spoofed sources: %d answers counted, %d dropped, tail bound %d; RSS peak %d KiB (before %d), anon %d KiB (before %d); "+
		"accounting's bound %d KiB, the memory check's worst case %d KiB",
		sources, snap.Answers, snap.Dropped, snap.TailBound, after["VmHWM"], before["VmHWM"], after["RssAnon"], before["RssAnon"],
		memcheck.ClientsWorstCase(len(caches))>>10, bound>>10)
	if after["VmHWM"]<<10 > bound {
		t.Errorf("peak RSS %d KiB over the memory check's worst case %d KiB", after["VmHWM"], bound>>10)
	}
}

func query(t *testing.T, name string) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendFrom sends q to to from src (a local address), on a socket of its own.
func sendFrom(t *testing.T, src netip.Addr, to unix.Sockaddr, q []byte) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
		t.Fatalf("bind %s: %v", src, err)
	}
	if err := unix.Sendto(fd, q, 0, to); err != nil {
		t.Fatalf("send from %s: %v", src, err)
	}
}

// status is /proc/pid/status's memory lines, in KiB.
func status(t *testing.T, pid int) map[string]int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.HasSuffix(v, " kB") {
			out[k], _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64)
		}
	}
	return out
}
