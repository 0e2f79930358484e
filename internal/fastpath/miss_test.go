package fastpath

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// blockingHandler holds every query until released, counting those it holds.
type blockingHandler struct {
	mu      sync.Mutex
	held    int
	changed *sync.Cond
	release chan struct{}
}

func (h *blockingHandler) ServeDNS(_ dns.ResponseWriter, _ *dns.Msg) {
	h.mu.Lock()
	h.held++
	h.changed.Broadcast()
	h.mu.Unlock()
	<-h.release
}

// waitHeld waits until n queries are held, within timeout.
func (h *blockingHandler) waitHeld(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	timer := time.AfterFunc(timeout, func() { h.mu.Lock(); h.changed.Broadcast(); h.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.held < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d queries reached the handler within %v", h.held, n, timeout)
		}
		h.changed.Wait()
	}
}

// Misses that all waited on their upstream at once each had a worker; once answered, missIdleMax of those
// workers stay to wait for the next miss and the rest end, however long a worker may wait (an hour here, so
// that no worker ends by its idle timer within the test): a starved agent under a flood had started one worker
// per datagram, and every one of them waited.
func TestIdleMissWorkersBounded(t *testing.T) {
	const held = 10 * missIdleMax
	if got := holdAndRelease(t, held); got != missIdleMax {
		t.Fatalf("%d workers left once the %d misses were answered, want missIdleMax (%d) waiting for the next", got, held, missIdleMax)
	}
}

// A storm of misses keeps its workers: its upstream's answers come back in bursts as large as the misses in
// flight (about 100 in bench/serve's miss workload), and every worker one frees must still be there for the
// next misses, or each of those starts a goroutine whose stack grows three times in CoreDNS's chain.
func TestStormKeepsItsMissWorkers(t *testing.T) {
	const held = 100
	if got := holdAndRelease(t, held); got != held {
		t.Fatalf("%d workers left once %d misses held at once were answered, want all %d waiting for the next", got, held, held)
	}
}

// holdAndRelease puts held misses that all wait on their upstream at once, answers them together, and returns the
// workers left waiting for the next miss once each has answered (and ended or waits).
func holdAndRelease(t *testing.T, held int) int32 {
	t.Helper()
	out, _ := listenOutbox(t, "udp4", "127.0.0.1:0")
	h := &blockingHandler{release: make(chan struct{})}
	h.changed = sync.NewCond(&h.mu)
	m := newMisses(out, -1, h)
	m.idleFor = time.Hour
	t.Cleanup(func() { m.shutdown(t.Context()) })

	from := netip.MustParseAddrPort("127.0.0.1:5300")
	for i := range held {
		q := new(dns.Msg)
		q.SetQuestion("held.example.", dns.TypeA)
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(b, uint16(i))
		m.put(b, from)
	}
	h.waitHeld(t, held, 30*time.Second)
	if got := m.workers.Load(); got != int32(held) {
		t.Fatalf("%d workers for %d misses held at once, want one each", got, held)
	}

	close(h.release)
	deadline := time.Now().Add(30 * time.Second)
	// Settled: every worker waits, and none is about to end (one that ends counts itself waiting first, beyond
	// missIdleMax, and stops being counted running last).
	settled := func() bool { w, i := m.workers.Load(), m.idle.Load(); return w == i && i <= missIdleMax }
	for !settled() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return m.workers.Load()
}
