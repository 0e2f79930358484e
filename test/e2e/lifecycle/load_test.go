package lifecycle

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// Load: every tick, one UDP query from a fresh socket (a new source port, as a pod's resolver does) to each
// target. A query fails when no usable answer arrives within queryTimeout: a timeout, an ICMP error, an rcode
// other than NOERROR, or an answer from neither kube-dns address.
const (
	loadInterval = 5 * time.Millisecond // 200 queries/s per target
	queryTimeout = time.Second
)

// targets are the pod's two ways to the node's DNS, and a surge's new address, in report order.
var targets = []string{harness.ClusterIP, harness.LocalIP, newIP}

// targetLabel names a target in the report.
var targetLabel = map[string]string{harness.ClusterIP: "clusterip", harness.LocalIP: "link-local", newIP: "new-ip",
	harness.ClusterIP6: "clusterip6", harness.LocalIP6: "local6"}

// counts is what happened to the queries sent to one target during one phase.
type counts struct {
	sent, failed, viaAgent, viaKubeDNS int
	reasons                            map[string]int
	firstFail, lastFail                time.Duration // send times of the first and last failed query, from the phase's start
}

// load sends the queries from the pod namespace and files each one under the phase current when it was sent.
type load struct {
	name    string // the report's: "lifecycle matrix" (its file: lifecycle-matrix.txt)
	targets []string
	stop    chan struct{}
	done    sync.WaitGroup
	phase   atomic.Int32
	seq     atomic.Uint32

	mu     sync.Mutex
	names  []string
	starts []time.Time
	stalls []time.Duration            // per phase: the longest the sender itself was held up past a tick
	counts map[int]map[string]*counts // phase -> target -> counts
	notes  []string                   // figures measured beside the load, printed under the table
}

// note adds a line under the report's table.
func (l *load) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, s)
}

// startLoad starts the load in the pod namespace towards targets; it runs until the test ends.
func startLoad(t *testing.T, podNS string, targets ...string) *load {
	t.Helper()
	l := &load{name: "lifecycle matrix", targets: targets, stop: make(chan struct{}), counts: map[int]map[string]*counts{}}
	l.begin("before any agent")
	started := make(chan error, 1)
	l.done.Add(1)
	go l.send(podNS, started)
	if err := <-started; err != nil {
		t.Fatalf("start load in %s: %v", podNS, err)
	}
	t.Cleanup(func() { close(l.stop); l.done.Wait() })
	return l
}

// stalled records how late the sender woke up: a machine too busy to run it on time also delays answers.
func (l *load) stalled(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := len(l.stalls) - 1
	l.stalls[p] = max(l.stalls[p], d)
}

// stall returns the longest sender stall seen during a phase.
func (l *load) stall(phase int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stalls[phase]
}

// begin starts a new phase; queries sent from now on count for it.
func (l *load) begin(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, name)
	l.starts = append(l.starts, time.Now())
	l.stalls = append(l.stalls, 0)
	l.counts[len(l.names)-1] = map[string]*counts{}
	l.phase.Store(int32(len(l.names) - 1))
}

// send runs on a thread that it moves into the pod namespace for good (the thread dies with the goroutine), so
// every socket it opens belongs to the pod.
func (l *load) send(podNS string, started chan<- error) {
	defer l.done.Done()
	runtime.LockOSThread()
	ns, err := netns.GetFromName(podNS)
	if err == nil {
		err = netns.Set(ns)
		ns.Close()
	}
	started <- err
	if err != nil {
		return
	}
	tick := time.NewTicker(loadInterval)
	defer tick.Stop()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	last := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		l.stalled(time.Since(last) - loadInterval)
		last = time.Now()
		for _, target := range l.targets {
			phase, sent := int(l.phase.Load()), time.Now()
			name := fmt.Sprintf("svc%d.default.svc.cluster.local.", l.seq.Add(1)%64)
			conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(target), Port: 53})
			if err != nil {
				l.record(phase, target, sent, "", fmt.Errorf("dial: %w", err))
				continue
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				defer conn.Close()
				answer, err := query(conn, name)
				l.record(phase, target, sent, answer, err)
			}()
		}
	}
}

// query sends one A query on conn and waits for its answer. Whether the answer came in time is judged by the
// kernel's receive timestamp (SO_TIMESTAMPNS), not by when this goroutine got to read it: on a busy 2-core CI
// machine a reader can be scheduled late, and that is not a lost query.
func query(conn *net.UDPConn, name string) (string, error) {
	if err := timestamps(conn); err != nil {
		return "", err
	}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	wire, err := m.Pack()
	if err != nil {
		return "", err
	}
	sent := time.Now()
	conn.SetDeadline(sent.Add(queryTimeout + schedulingSlack))
	if _, err := conn.Write(wire); err != nil {
		return "", err
	}
	buf, oob := make([]byte, 4096), make([]byte, 128)
	for {
		n, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
		if err != nil {
			return "", err
		}
		if at, ok := received(oob[:oobn]); ok && at.Sub(sent) > queryTimeout {
			return "", errLate
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:n]); err != nil || r.Id != m.Id {
			continue
		}
		return answerOf(r)
	}
}

// answerOf is the first A record of a successful answer.
func answerOf(r *dns.Msg) (string, error) {
	if r.Rcode != dns.RcodeSuccess {
		return "", fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), nil
		}
	}
	return "", errors.New("no A record")
}

// schedulingSlack is how long past queryTimeout a reader may wake up and still find an answer that the kernel
// received in time.
const schedulingSlack = 2 * time.Second

// errLate is an answer the kernel received after queryTimeout: a failure by the definition above, told
// apart from a lost query (no answer at all) because only an overloaded machine makes a served query late.
var errLate = errors.New("answered after the timeout")

func timestamps(conn *net.UDPConn) error {
	sc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// received returns the kernel's receive time from a datagram's control messages.
func received(oob []byte) (time.Time, bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, cm := range msgs {
		if cm.Header.Level == syscall.SOL_SOCKET && cm.Header.Type == syscall.SCM_TIMESTAMPNS && len(cm.Data) >= 16 {
			ts := (*syscall.Timespec)(unsafe.Pointer(&cm.Data[0]))
			return time.Unix(ts.Unix()), true
		}
	}
	return time.Time{}, false
}

func (l *load) record(phase int, target string, sent time.Time, answer string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts[phase][target]
	if c == nil {
		c = &counts{reasons: map[string]int{}}
		l.counts[phase][target] = c
	}
	failed := c.failed
	defer func() {
		if c.failed > failed && os.Getenv("LIFECYCLE_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "FAILED %s %s sent %s: %v %s\n", l.names[phase], target, sent.Format("15:04:05.000000"), err, answer)
		}
		if c.failed > failed {
			at := sent.Sub(l.starts[phase])
			if failed == 0 || at < c.firstFail {
				c.firstFail = at
			}
			c.lastFail = max(c.lastFail, at)
		}
	}()
	c.tally(answer, err)
}

// tally counts one query: who answered it, or why it failed.
func (c *counts) tally(answer string, err error) {
	c.sent++
	switch {
	case err != nil:
		c.failed++
		c.reasons[reason(err)]++
	case answer == harness.AnswerAgent:
		c.viaAgent++
	case answer == harness.AnswerKubeDNS:
		c.viaKubeDNS++
	default:
		c.failed++
		c.reasons["wrong answer "+answer]++
	}
}

func reason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, errLate):
		return "late"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	return err.Error()
}

// settle waits until every query of the current phase has had its answer or its timeout.
func (l *load) settle() { time.Sleep(queryTimeout + schedulingSlack + 100*time.Millisecond) }

// get returns the counts of one phase and target.
func (l *load) get(phase int, target string) counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.counts[phase][target]; c != nil {
		r := *c
		r.reasons = map[string]int{}
		for k, v := range c.reasons {
			r.reasons[k] = v
		}
		return r
	}
	return counts{}
}

// current is the index of the phase queries are filed under now.
func (l *load) current() int { return int(l.phase.Load()) }

// table renders the failed-query counts of every phase, one row per phase and target.
func (l *load) table() string {
	l.mu.Lock()
	names := append([]string(nil), l.names...)
	l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%-48s %-10s %6s %6s %8s %11s %6s  %s\n", "case", "target", "sent", "failed", "by agent", "by kube-dns", "stall", "failures (sent at, from the case's start)")
	for i, name := range names {
		for _, target := range l.targets {
			c := l.get(i, target)
			if c.sent == 0 {
				continue
			}
			label := targetLabel[target]
			when := ""
			if c.failed > 0 {
				when = fmt.Sprintf(" (%v..%v)", c.firstFail.Round(time.Millisecond), c.lastFail.Round(time.Millisecond))
			}
			fmt.Fprintf(&b, "%-48s %-10s %6d %6d %8d %11d %6v  %s%s\n", name, label, c.sent, c.failed, c.viaAgent, c.viaKubeDNS,
				l.stall(i).Round(time.Millisecond), reasons(c.reasons), when)
		}
	}
	return b.String()
}

func reasons(m map[string]int) string { return harness.Counted(m) }

// reportDirEnv names a directory for the table as a file: `go test ./...` shows a passing package's output
// only with -v, so `make test` can set it and print the file afterwards.
const reportDirEnv = "NODELOCALDNS_TEST_REPORTS"

// report prints the table to the test log, to stdout, and to $NODELOCALDNS_TEST_REPORTS/lifecycle-matrix.txt.
func (l *load) report(t *testing.T) {
	tbl := l.table()
	l.mu.Lock()
	for _, n := range l.notes {
		tbl += "\n" + n + "\n"
	}
	l.mu.Unlock()
	out := fmt.Sprintf("%s: failed DNS queries from the pod namespace per case (%d/s per target, %v timeout;\n"+
		"late = answered after the timeout, by the kernel's receive time; stall = longest the load generator itself was held up)\n%s",
		l.name, int(time.Second/loadInterval), queryTimeout, tbl)
	t.Log(out)
	fmt.Fprintf(os.Stdout, "\n%s\n", out)
	if dir := os.Getenv(reportDirEnv); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Errorf("write report: %v", err)
		} else if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(l.name, " ", "-")+".txt"), []byte(out), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
}
