package clients

import (
	"net/netip"
	"sync/atomic"
	"time"
)

// event is one answer as a writer records it.
type event struct {
	addr    [16]byte // the source address, IPv4 mapped into IPv6 (its zone dropped: one link-local client per address)
	name    string   // the question's name, lower case
	latency uint32   // a miss's time to answer, in microseconds (saturated)
	rcode   uint8
	hit     bool
}

// Shard is one writer's ring. One goroutine at a time writes to it (a fast path reader, or the handler under
// Accounting.chainMu); the drain reads what it published. Between the two, the published head and the
// drained tail: the writer fills slots [head, tail+ringSize), the drain empties [tail, head), and each side
// only stores its own index, so neither waits for the other. A writer that finds the ring full drops the
// answer and counts it (Snapshot.Dropped): the drain is late, and an answer is never held up for accounting.
type Shard struct {
	acct *Accounting
	ring [ringSize]event

	head    atomic.Uint64 // published by the writer
	tail    atomic.Uint64 // advanced by the drain
	dropped atomic.Uint64 // published by the writer

	// The writer's own: the next slot, the end of the room it last saw free, answers dropped since published.
	next, room, drops uint64

	released atomic.Bool // the writer is gone: the drain empties the ring once more and forgets it
}

// Hit records a fast-path answer (from the cache, so a hit) to from for name with rcode. It does not allocate
// and takes no lock; the answer is counted once the writer publishes it.
func (s *Shard) Hit(from netip.AddrPort, name string, rcode int) {
	s.add(from.Addr().As16(), name, uint8(rcode), true, 0)
}

func (s *Shard) add(addr [16]byte, name string, rcode uint8, hit bool, latency uint32) {
	if s.next == s.room {
		s.room = s.tail.Load() + ringSize
		if s.next == s.room {
			s.drops++
			return
		}
	}
	s.ring[s.next%ringSize] = event{addr: addr, name: name, rcode: rcode, hit: hit, latency: latency}
	s.next++
}

// Publish makes what the writer recorded since the last Publish visible to the drain, and wakes the drain
// when the ring is half full. A fast path reader calls it once per batch.
func (s *Shard) Publish() {
	if s.drops != 0 {
		s.dropped.Add(s.drops)
		s.drops = 0
	}
	if s.next == s.head.Load() {
		return
	}
	s.head.Store(s.next)
	if s.next+ringSize/2 >= s.room { // half full when the writer last looked at the tail: look again
		s.room = s.tail.Load() + ringSize
		if s.next+ringSize/2 >= s.room {
			s.acct.wake()
		}
	}
}

// Release hands the shard back: its writer records nothing more. What it published is still counted.
func (s *Shard) Release() {
	s.released.Store(true)
	s.acct.wake()
}

// drain moves what s published into t; the drain goroutine's, with t's lock held.
func (s *Shard) drain(t *table) {
	head, tail := s.head.Load(), s.tail.Load()
	for i := tail; i != head; i++ {
		e := &s.ring[i%ringSize]
		t.add(e)
		e.name = "" // the name is not kept alive by the ring
	}
	s.tail.Store(head)
	t.dropped += s.dropped.Swap(0)
}

// micros is d in microseconds, saturated to what an event holds.
func micros(d time.Duration) uint32 {
	us := d.Microseconds()
	switch {
	case us < 0:
		return 0
	case us > int64(^uint32(0)):
		return ^uint32(0)
	}
	return uint32(us)
}
