package serve

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// The fast path (internal/fastpath) against CoreDNS alone: two agents from the same binary and configuration,
// one with NODELOCALDNS_FASTPATH=off, get the same query stream, one query at a time, four times over (a miss,
// an answer from CoreDNS's cache the fast path remembers, a second one it learns, and answers the fast path
// serves). Every answer must be
// the same bytes apart from the ID and the TTLs, and afterwards every counter the same.
//
// Conventions: the agent with the fast path listens on 127.0.0.10, the one without on 127.0.0.11 (each with its
// prometheus plugin on port 9253 of its own address); zoneUpstream on 127.0.0.63 is the cluster DNS and the node's
// upstream.

const zoneAddr = "127.0.0.63:53"

func startPair(t *testing.T, corefile func(string) string) {
	t.Helper()
	zoneUpstream(t, zoneAddr)
	start := func(ip string, env ...string) *harness.Agent {
		dir := t.TempDir()
		vol := harness.NewConfigMapVolume(t, filepath.Join(dir, "kube-dns"), map[string]string{
			"upstreamNameservers": `["127.0.0.63"]`,
		})
		base := corefile(strings.ReplaceAll(harness.StandardCorefile(ip, "", "cluster.local"), "prometheus :9253", "prometheus "+ip+":9253"))
		a := harness.Start(t, harness.Config{
			Dir:          dir,
			BaseCorefile: base,
			Args: []string{"-localip", ip, "-setupinterface=false", "-setupiptables=false",
				"-upstreamsvc", "kube-dns-upstream", "-kubednscm", vol.Dir, "-health-port", "8080"},
			Env: append([]string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=127.0.0.63"}, env...),
		})
		a.WaitReady()
		return a
	}
	on := start("127.0.0.10")
	off := start("127.0.0.11", "NODELOCALDNS_FASTPATH=off")
	on.WaitLog(10*time.Second, "the fast path serving 127.0.0.10:53", func(l harness.LogLine) bool {
		return l.Msg == "fast path serving" && l.Raw["addr"] == "127.0.0.10:53"
	})
	for _, l := range off.Lines() {
		if strings.HasPrefix(l.Msg, "fast path") {
			t.Fatalf("NODELOCALDNS_FASTPATH=off, yet the agent logged %q", l.Msg)
		}
	}
}

// question is one query of the stream.
type question struct {
	name  string
	qtype uint16
	edns  uint16 // EDNS buffer size; 0 for no OPT record
	do    bool
	cd    bool
	tcp   bool
}

func (q question) String() string {
	return fmt.Sprintf("%s %s edns=%d do=%v cd=%v tcp=%v", q.name, dns.TypeToString[q.qtype], q.edns, q.do, q.cd, q.tcp)
}

func stream() []question {
	var qs []question
	for _, n := range []string{"web.svc.cluster.local.", "WEB.svc.Cluster.local.", "Web.Svc.Cluster.Local.", "web.svc.cluster.local."} {
		qs = append(qs, question{name: n, qtype: dns.TypeA}, question{name: n, qtype: dns.TypeAAAA, edns: 1232})
	}
	for _, e := range []uint16{0, 512, 1232, 4096} {
		qs = append(qs, question{name: "big.svc.cluster.local.", qtype: dns.TypeA, edns: e})
	}
	qs = append(qs,
		question{name: "big.svc.cluster.local.", qtype: dns.TypeA, tcp: true},
		question{name: "BIG.svc.cluster.local.", qtype: dns.TypeA, edns: 1232, do: true},
		question{name: "_http._tcp.web.svc.cluster.local.", qtype: dns.TypeSRV},
		question{name: "_http._tcp.web.svc.cluster.local.", qtype: dns.TypeSRV, edns: 1232, do: true},
		question{name: "1.0.1.10.in-addr.arpa.", qtype: dns.TypePTR},
		question{name: "1.0.1.10.IN-ADDR.arpa.", qtype: dns.TypePTR, edns: 4096},
		question{name: "nodata.svc.cluster.local.", qtype: dns.TypeAAAA},
		question{name: "nodata.svc.cluster.local.", qtype: dns.TypeAAAA, edns: 1232, cd: true},
		question{name: "missing.svc.cluster.local.", qtype: dns.TypeA},
		question{name: "Missing.svc.cluster.local.", qtype: dns.TypeA, edns: 1232, do: true, cd: true},
		question{name: "web.svc.cluster.local.", qtype: dns.TypeA, edns: 1232, do: true},
		question{name: "web.svc.cluster.local.", qtype: dns.TypeA, cd: true},
		question{name: "web.svc.cluster.local.", qtype: dns.TypeA, tcp: true},
		question{name: "www.example.org.", qtype: dns.TypeA},
		question{name: "WWW.Example.ORG.", qtype: dns.TypeA, edns: 1232},
		question{name: "www.example.org.", qtype: dns.TypeAAAA, tcp: true},
	)
	return qs
}

// exchange sends q to server and returns the raw answer.
func exchange(t *testing.T, server string, q question, id uint16) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(q.name, q.qtype)
	m.Id = id
	m.CheckingDisabled = q.cd
	if q.edns > 0 {
		m.SetEdns0(q.edns, q.do)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	netw := "udp"
	if q.tcp {
		netw = "tcp"
	}
	c, err := net.DialTimeout(netw, server, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if q.tcp {
		b = append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatalf("%v to %s: %v", q, server, err)
	}
	if q.tcp {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("%v to %s: %v", q, server, err)
		}
		buf := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("%v to %s: %v", q, server, err)
		}
		return buf
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("%v to %s: %v", q, server, err)
	}
	return buf[:n]
}

// normalize zeroes the ID and every RR's TTL (but OPT's, which holds the extended rcode and flags).
func normalize(t *testing.T, b []byte) []byte {
	t.Helper()
	b = slices.Clone(b)
	if len(b) < 12 {
		t.Fatalf("answer of %d bytes", len(b))
	}
	b[0], b[1] = 0, 0
	skip := func(off int) int {
		for off < len(b) {
			l := int(b[off])
			if l == 0 {
				return off + 1
			}
			if l&0xC0 == 0xC0 {
				return off + 2
			}
			off += 1 + l
		}
		t.Fatalf("bad name in %x", b)
		return 0
	}
	off := 12
	for range binary.BigEndian.Uint16(b[4:]) {
		off = skip(off) + 4
	}
	rrs := int(binary.BigEndian.Uint16(b[6:])) + int(binary.BigEndian.Uint16(b[8:])) + int(binary.BigEndian.Uint16(b[10:]))
	for range rrs {
		off = skip(off)
		if binary.BigEndian.Uint16(b[off:]) != dns.TypeOPT {
			binary.BigEndian.PutUint32(b[off+4:], 0)
		}
		off += 10 + int(binary.BigEndian.Uint16(b[off+8:]))
	}
	return b
}

func show(b []byte) string {
	var m dns.Msg
	if err := m.Unpack(b); err != nil {
		return fmt.Sprintf("%x (%v)", b, err)
	}
	return m.String()
}

func TestFastPathAnswersLikeCoreDNS(t *testing.T) {
	answersLikeCoreDNS(t, func(c string) string { return c })
}

// resilient is the standard Corefile with prefetch and serve_stale (prefer_positive) in every block, as the
// popular chart's values turn them on: the fast path serves these blocks too.
func resilient(c string) string {
	const opts = "prefetch 2 1m 10%\n serve_stale 1h immediate 30s\n serve_stale_policy prefer_positive\n"
	c = strings.ReplaceAll(c, "cache 30\n", "cache 30 {\n "+opts+"}\n")
	return regexp.MustCompile(`(denial \d+ \d+\n)`).ReplaceAllString(c, "${1} "+opts)
}

func TestFastPathAnswersLikeCoreDNSResilient(t *testing.T) {
	if c := resilient(harness.StandardCorefile("127.0.0.10", "", "cluster.local")); strings.Count(c, "serve_stale_policy") < 4 {
		t.Fatalf("not every block of the standard Corefile got serve_stale:\n%s", c)
	}
	answersLikeCoreDNS(t, resilient)
}

func answersLikeCoreDNS(t *testing.T, corefile func(string) string) {
	testenv.RequireRoot(t)
	startPair(t, corefile)
	// The agents' own start-up (the loop plugin's probe of each server block) counts too: wait until both have
	// counted it, then compare the metrics as what the stream added.
	waitProbed(t, "127.0.0.10")
	waitProbed(t, "127.0.0.11")
	baseOn, baseOff := coreMetrics(t, "127.0.0.10", nil), coreMetrics(t, "127.0.0.11", nil)
	qs := stream()
	const rounds = 4
	for round := range rounds {
		for i, q := range qs {
			id := uint16(round*1000 + i + 1)
			a := exchange(t, "127.0.0.10:53", q, id)
			b := exchange(t, "127.0.0.11:53", q, id+500)
			if binary.BigEndian.Uint16(a) != id {
				t.Errorf("round %d, %v: answer ID %d, want %d", round+1, q, binary.BigEndian.Uint16(a), id)
			}
			if !bytes.Equal(normalize(t, a), normalize(t, b)) {
				t.Errorf("round %d, %v: the fast path answered\n%s\nCoreDNS alone answered\n%s", round+1, q, show(a), show(b))
			}
			// No pause for the fast path to learn the answer: it learns on the goroutine that wrote it, right after
			// the write, while this loop asks the other agent. Which of the two answered is by design invisible
			// from outside the process (same bytes, same counters); internal/fastpath asserts the learning
			// itself on Path.Stored, which only its own tests can reach.
		}
	}

	t.Run("metrics", func(t *testing.T) {
		// Both count an answer just after sending it: wait until each has counted every answer of the stream.
		waitResponses(t, "127.0.0.10", baseOn, rounds*len(qs))
		waitResponses(t, "127.0.0.11", baseOff, rounds*len(qs))
		got, want := coreMetrics(t, "127.0.0.10", baseOn), coreMetrics(t, "127.0.0.11", baseOff)
		if len(want) < 20 {
			t.Fatalf("only %d series from CoreDNS alone:\n%s", len(want), strings.Join(want, "\n"))
		}
		if !slices.Equal(got, want) {
			t.Errorf("metrics with the fast path differ from CoreDNS alone's:\n%s", diff(got, want))
		}
		hits := 0.0
		for _, l := range got {
			if strings.HasPrefix(l, "coredns_cache_hits_total{") {
				var v float64
				fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
				hits += v
			}
		}
		if hits < float64(len(qs)) {
			t.Errorf("%v cache hits counted, want at least %d (the last round)", hits, len(qs))
		}
	})
}

// probedZones are the server blocks of harness.StandardCorefile, each with the loop plugin, whose start-up probe
// (a query for a random name in the block's zone, through the server itself) is an agent's only DNS traffic
// before the stream.
var probedZones = []string{"cluster.local.", "in-addr.arpa.", "ip6.arpa.", "."}

// waitProbed waits until the agent on ip has counted a response in every block the loop plugin probes.
func waitProbed(t *testing.T, ip string) {
	t.Helper()
	testenv.EventuallyNil(t, 10*time.Second, "the loop plugin's probes answered by "+ip, func() error {
		ms := coreMetrics(t, ip, nil)
		for _, z := range probedZones {
			if !slices.ContainsFunc(ms, func(l string) bool {
				return strings.HasPrefix(l, "coredns_dns_responses_total{") && strings.Contains(l, `zone="`+z+`"`)
			}) {
				return fmt.Errorf("no response counted in zone %q yet", z)
			}
		}
		return nil
	})
}

// waitResponses waits until the agent on ip has counted n responses since base.
func waitResponses(t *testing.T, ip string, base []string, n int) {
	t.Helper()
	testenv.EventuallyNil(t, 5*time.Second, fmt.Sprintf("%d responses counted by %s", n, ip), func() error {
		sum := 0.0
		for _, l := range coreMetrics(t, ip, base) {
			if strings.HasPrefix(l, "coredns_dns_responses_total{") {
				_, v := splitSample(l)
				sum += v
			}
		}
		if sum != float64(n) {
			return fmt.Errorf("%v counted", sum)
		}
		return nil
	})
}

// compared are the metric families a fast-path answer counts into, and the cache's and forward's, which must
// not notice it; the duration histograms only by their counts (latency differs, of course).
var compared = []string{
	"coredns_dns_requests_total{", "coredns_dns_responses_total{", "coredns_dns_do_requests_total{",
	"coredns_dns_request_size_bytes_", "coredns_dns_response_size_bytes_", "coredns_dns_request_duration_seconds_count{",
	"coredns_cache_hits_total{", "coredns_cache_misses_total{", "coredns_cache_requests_total{", "coredns_cache_entries{",
	"coredns_forward_requests_total{", "coredns_forward_responses_total{",
}

// coreMetrics scrapes the prometheus plugin on ip and returns the compared series that changed since base
// (all when base is nil) with how much, sorted, with ip in the labels replaced by "IP".
func coreMetrics(t *testing.T, ip string, base []string) []string {
	t.Helper()
	resp, err := http.Get("http://" + ip + ":9253/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		for _, p := range compared {
			if strings.HasPrefix(l, p) {
				out = append(out, strings.ReplaceAll(l, ip, "IP"))
				break
			}
		}
	}
	slices.Sort(out)
	if base == nil {
		return out
	}
	was := map[string]float64{}
	for _, l := range base {
		series, v := splitSample(l)
		was[series] = v
	}
	var changed []string
	for _, l := range out {
		series, v := splitSample(l)
		if d := v - was[series]; d != 0 {
			changed = append(changed, fmt.Sprintf("%s %g", series, d))
		}
	}
	return changed
}

func splitSample(l string) (string, float64) {
	i := strings.LastIndexByte(l, ' ')
	var v float64
	fmt.Sscan(l[i+1:], &v)
	return l[:i], v
}

func diff(got, want []string) string {
	var b strings.Builder
	for _, l := range got {
		if !slices.Contains(want, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return b.String()
}
