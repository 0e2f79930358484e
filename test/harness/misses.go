package harness

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Misses is a stream of cache misses: every tick, one UDP A query for a name never asked before to each target,
// from a fresh socket (a new source port, as a pod's resolver uses), each waiting up to its timeout for an
// answer. A query is lost when no successful answer with an A record arrives in time.
type Misses struct {
	dial    func(target string) (*net.UDPConn, error)
	targets []string
	zone    string
	timeout time.Duration
	seq     atomic.Int64

	stop     chan struct{}
	sender   sync.WaitGroup
	inflight sync.WaitGroup

	mu     sync.Mutex
	counts MissCounts
}

// MissCounts is what happened to a stream's queries.
type MissCounts struct {
	Sent, Lost int
	Answers    map[string]int // by the answer's A record: each upstream of the tests answers its own
	Reasons    map[string]int // why the lost ones were lost
	Lost1st    time.Time      // when the first lost query was sent
}

func (c MissCounts) String() string {
	return fmt.Sprintf("sent %d, lost %d (%s), answered by %s", c.Sent, c.Lost, Counted(c.Reasons), Counted(c.Answers))
}

// Counted renders counts by key as "a=1 b=2", sorted.
func Counted(m map[string]int) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// StartMisses starts the stream: names q<n>.<zone>, sockets from dial (which decides the client's namespace).
func StartMisses(t testing.TB, dial func(target string) (*net.UDPConn, error), zone string, every, timeout time.Duration, targets ...string) *Misses {
	m := &Misses{dial: dial, targets: targets, zone: zone, timeout: timeout, stop: make(chan struct{}),
		counts: MissCounts{Answers: map[string]int{}, Reasons: map[string]int{}}}
	m.sender.Add(1)
	go m.send(every)
	t.Cleanup(func() { m.Stop() })
	return m
}

func (m *Misses) send(every time.Duration) {
	defer m.sender.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		for _, target := range m.targets {
			name := fmt.Sprintf("q%d.%s.", m.seq.Add(1), m.zone)
			sent := time.Now()
			conn, err := m.dial(target)
			if err != nil {
				m.record(sent, "", fmt.Errorf("dial: %w", err))
				continue
			}
			m.inflight.Add(1)
			go func() {
				defer m.inflight.Done()
				defer conn.Close()
				answer, err := m.ask(conn, name)
				m.record(sent, answer, err)
			}()
		}
	}
}

// ask sends one A query for name on conn and waits for its answer, skipping datagrams that are not it.
func (m *Misses) ask(conn *net.UDPConn, name string) (string, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Timeout: m.timeout}
	r, _, err := c.ExchangeWithConn(q, &dns.Conn{Conn: conn})
	if err != nil {
		return "", err
	}
	return firstA(r)
}

func (m *Misses) record(sent time.Time, answer string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &m.counts
	c.Sent++
	if err == nil {
		c.Answers[answer]++
		return
	}
	if c.Lost == 0 || sent.Before(c.Lost1st) {
		c.Lost1st = sent
	}
	c.Lost++
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		c.Reasons["timeout"]++
	default:
		c.Reasons[err.Error()]++
	}
}

// Counts returns the counts so far: the queries answered or lost by now, not those still in flight.
func (m *Misses) Counts() MissCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counts
	c.Answers, c.Reasons = clone(c.Answers), clone(c.Reasons)
	return c
}

// WaitAnswered waits until n more queries than before have been answered by who (an A record of the answers),
// so that a test needing traffic of some kind waits for it instead of sleeping for a time a busy machine may not
// fill. The timeout only bounds a failing test.
func (m *Misses) WaitAnswered(t testing.TB, before MissCounts, who string, n int, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("%d more queries answered by %s", n, who), func() bool {
		return m.Counts().Answers[who]-before.Answers[who] >= n
	})
}

// Stop ends the stream, waits for every query sent to get its answer or its timeout, and returns the counts.
func (m *Misses) Stop() MissCounts {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.sender.Wait()
	m.inflight.Wait()
	return m.Counts()
}

func clone(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
