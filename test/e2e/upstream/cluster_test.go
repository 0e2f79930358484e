package upstream

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/forward"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The cluster of these tests, as a node sees it:
//
//	agent       169.254.20.10 on the node's loopback (-setupinterface=false), the standard Corefile
//	kube-dns    three pods, 198.51.100.11-13 in one peer namespace (node side 198.51.100.1)
//	ClusterIP   10.96.0.11 (kube-dns-upstream): kube-proxy's nftables DNAT, numgen random mod N over the live
//	            endpoints, per connection (per flow for UDP), in output (the agent and the control are host
//	            clients here) and prerouting
//
// The no-cache control asks the ClusterIP itself over UDP, a new socket (so a new flow) per query, as a pod's
// resolver does. Each stand-in counts the queries it answers by the first label's prefix, so the cache's and
// the control's load are told apart on the same pods.
const (
	localIP   = "169.254.20.10"
	clusterIP = "10.96.0.11"
	zone      = "cluster.local."
	kdHost    = "198.51.100.1"
)

var podAddrs = []string{"198.51.100.11", "198.51.100.12", "198.51.100.13"}

// pod is one kube-dns stand-in: a real DNS server on its own address.
type pod struct {
	i    int
	addr string
	peer *testenv.Peer
	mu   sync.Mutex
	seen map[string]int // by the query's first label's prefix up to '-'
	stop func()
}

func (p *pod) serve(w dns.ResponseWriter, r *dns.Msg) {
	if len(r.Question) != 1 {
		return
	}
	name := r.Question[0].Name
	prefix, _, _ := strings.Cut(name, "-")
	p.mu.Lock()
	p.seen[prefix]++
	p.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
		A: net.IPv4(203, 0, 113, byte(p.i+1))}}
	_ = w.WriteMsg(m)
}

func (p *pod) count(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[prefix]
}

// start (re)starts the pod's server: UDP and TCP, with CoreDNS's server settings that matter here (no limit on
// the queries a TCP connection may carry: core/dnsserver's tcpMaxQueries). stop closes its sockets and its
// connections.
func (p *pod) start(t *testing.T) {
	p.peer.Do(t, func() {
		pc, err := net.ListenPacket("udp", p.addr+":53")
		if err != nil {
			t.Fatalf("pod %d: %v", p.i, err)
		}
		ln, err := net.Listen("tcp", p.addr+":53")
		if err != nil {
			t.Fatalf("pod %d: %v", p.i, err)
		}
		h := dns.HandlerFunc(p.serve)
		servers := []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h, MaxTCPQueries: -1}}
		started := make(chan struct{}, 2)
		for _, s := range servers {
			s.NotifyStartedFunc = func() { started <- struct{}{} }
			go func() { _ = s.ActivateAndServe() }()
		}
		<-started
		<-started
		var once sync.Once
		p.stop = func() {
			once.Do(func() {
				for _, s := range servers {
					_ = s.Shutdown()
				}
			})
		}
		t.Cleanup(p.stop)
	})
}

// cluster is the fixture: the pods, the DNAT and the agent.
type cluster struct {
	t     *testing.T
	peer  *testenv.Peer
	pods  []*pod
	agent *harness.Agent
}

func newCluster(t *testing.T) *cluster {
	testenv.RequireRoot(t)
	c := &cluster{t: t, peer: testenv.AddPeer(t, "kubedns", kdHost, podAddrs[0])}
	for i, a := range podAddrs {
		if i > 0 {
			c.peer.Exec(t, "ip", "addr", "add", a+"/24", "dev", "eth0")
		}
		p := &pod{i: i, addr: a, peer: c.peer, seen: map[string]int{}}
		p.start(t)
		c.pods = append(c.pods, p)
	}
	testenv.Run(t, "ip", "route", "replace", "10.96.0.0/16", "via", podAddrs[0])
	c.endpoints(0, 1, 2)
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "ip", "kube-proxy").Run() })
	testenv.Run(t, "ip", "addr", "add", localIP+"/32", "dev", "lo")
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", localIP+"/32", "dev", "lo").Run() })
	return c
}

// endpoints makes the Service's endpoints exactly these pods, in one transaction, as kube-proxy's sync does.
// Flows already placed keep their pod (conntrack), as with kube-proxy.
func (c *cluster) endpoints(live ...int) {
	var b strings.Builder
	b.WriteString("table ip kube-proxy\ndelete table ip kube-proxy\ntable ip kube-proxy {\n")
	for i, a := range podAddrs {
		fmt.Fprintf(&b, "\tchain ep%d {\n\t\tmeta l4proto { tcp, udp } dnat to %s:53\n\t}\n", i, a)
	}
	var vmap []string
	for k, i := range live {
		vmap = append(vmap, fmt.Sprintf("%d : goto ep%d", k, i))
	}
	fmt.Fprintf(&b, "\tchain svc {\n\t\tnumgen random mod %d vmap { %s }\n\t}\n", len(live), strings.Join(vmap, ", "))
	fmt.Fprintf(&b, "\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n\t\tip daddr %s meta l4proto { tcp, udp } th dport 53 goto svc\n\t}\n", clusterIP)
	fmt.Fprintf(&b, "\tchain prerouting {\n\t\ttype nat hook prerouting priority -100; policy accept;\n\t\tip daddr %s meta l4proto { tcp, udp } th dport 53 goto svc\n\t}\n}\n", clusterIP)
	testenv.NftApply(c.t, b.String())
}

// silence makes pod i drop every packet (a dead node: no answer, no reset), or lets them through again.
func (c *cluster) silence(i int, on bool) {
	if on {
		c.peer.Exec(c.t, "nft", "add table ip dead; add chain ip dead in { type filter hook prerouting priority -300; policy accept; }; add rule ip dead in ip daddr "+podAddrs[i]+" drop")
		return
	}
	c.peer.Exec(c.t, "nft", "delete table ip dead")
}

// startAgent starts the agent with the standard Corefile, forwarding cluster.local to the ClusterIP.
func (c *cluster) startAgent() {
	dir := c.t.TempDir()
	vol := harness.NewConfigMapVolume(c.t, filepath.Join(dir, "kube-dns"), nil)
	c.agent = harness.Start(c.t, harness.Config{
		Dir:          dir,
		BaseCorefile: harness.StandardCorefile(localIP, "", "cluster.local"),
		Args: []string{"-localip", localIP, "-setupinterface=false", "-setupiptables=false",
			"-upstreamsvc", "kube-dns-upstream", "-kubednscm", vol.Dir},
		// Our forward (the default, named so that NODELOCALDNS_BIN may run a build from before it was, for a
		// before).
		Env: []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + clusterIP, forward.Env + "=pipelined"},
	})
	c.agent.WaitReady()
}

// perPod is each pod's count of queries with prefix.
func (c *cluster) perPod(prefix string) []int {
	out := make([]int, len(c.pods))
	for i, p := range c.pods {
		out[i] = p.count(prefix)
	}
	return out
}

// result is one query's fate.
type result struct {
	sent    time.Time
	latency time.Duration
	err     error
}

// load sends unique A queries for <prefix>-<n>.cluster.local at rate per second to server, each from a new UDP
// socket, until stop is closed; every query waits at most timeout.
type load struct {
	prefix  string
	server  string
	mu      sync.Mutex
	results []result
	wg      sync.WaitGroup
	n       atomic.Int64
}

const clientTimeout = 2 * time.Second

func startLoad(prefix, server string, rate int, stop <-chan struct{}) *load {
	l := &load{prefix: prefix, server: server}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				l.wg.Add(1)
				go l.ask()
			}
		}
	}()
	return l
}

func (l *load) ask() {
	defer l.wg.Done()
	name := fmt.Sprintf("%s-%d.%s", l.prefix, l.n.Add(1), zone)
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: clientTimeout}
	start := time.Now()
	r, _, err := c.Exchange(m, l.server)
	if err == nil && r.Rcode != dns.RcodeSuccess {
		err = fmt.Errorf("%s", dns.RcodeToString[r.Rcode])
	}
	if err == nil && len(r.Answer) != 1 {
		err = fmt.Errorf("no answer")
	}
	l.mu.Lock()
	l.results = append(l.results, result{sent: start, latency: time.Since(start), err: err})
	l.mu.Unlock()
}

// wait waits for every query sent to be answered or time out.
func (l *load) wait() []result {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]result(nil), l.results...)
}

// summary is what a window of results says.
type summary struct {
	sent, failed int
	p99          time.Duration
}

func summarize(rs []result) summary {
	s := summary{sent: len(rs)}
	var lat []time.Duration
	for _, r := range rs {
		if r.err != nil {
			s.failed++
			lat = append(lat, clientTimeout)
			continue
		}
		lat = append(lat, r.latency)
	}
	if len(lat) > 0 {
		sortDurations(lat)
		s.p99 = lat[(len(lat)*99)/100]
	}
	return s
}

func (s summary) String() string {
	return fmt.Sprintf("%d sent, %d failed (%.2f%%), p99 %v", s.sent, s.failed, 100*float64(s.failed)/float64(max(1, s.sent)), s.p99.Round(time.Millisecond))
}
