package clients

import (
	"container/heap"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// Rcode classes a client's answers are counted by.
const (
	rcNoError = iota
	rcNXDomain
	rcServFail
	rcRefused
	rcOther
	numRcodes
)

func rcodeClass(rcode uint8) int {
	switch int(rcode) {
	case dns.RcodeSuccess:
		return rcNoError
	case dns.RcodeNameError:
		return rcNXDomain
	case dns.RcodeServerFailure:
		return rcServFail
	case dns.RcodeRefused:
		return rcRefused
	}
	return rcOther
}

// client is one table slot: an address and what it asked since it entered the table.
type client struct {
	addr   [16]byte
	count  uint64 // the space-saving estimate: answers since it entered, plus over
	over   uint64 // the count of the client it replaced: what count may overstate
	since  time.Time
	hits   uint64
	misses uint64
	rcodes [numRcodes]uint64
	missUS uint64 // the misses' latencies summed, in microseconds
	names  topNames
	// The last closed window (roll): answers, NXDOMAIN, SERVFAIL and hits in it, per second.
	rate, nxRate, sfRate, hitRate float64
	prev                          [4]uint64 // answers (count), NXDOMAIN, SERVFAIL and hits at the window's start
	idx                           int       // in the heap
	ns                            *nsCount  // its namespace's counters (namespaces.go); nil without pod identity
}

// topNames are a client's most asked names.
type topNames [NamesPerClient]nameCount

type nameCount struct {
	name  string
	count uint64
	over  uint64
}

// table is the space-saving summary: slots by address, and a min-heap on count that says which goes first.
type table struct {
	slots   []client
	byAddr  map[[16]byte]*client
	heap    minHeap
	last    *client // the previous event's client: a run of answers to one client skips the map
	total   uint64  // every answer counted
	dropped uint64  // answers the writers could not record (their ring was full)
	now     func() time.Time
	namer   func(netip.Addr) string // pod identity (Accounting.SetNamer); nil: no namespaces
	byNS    map[string]*nsCount
}

func newTable(n int, now func() time.Time) *table {
	return &table{slots: make([]client, n), byAddr: make(map[[16]byte]*client, n), heap: make(minHeap, 0, n), now: now,
		byNS: map[string]*nsCount{}}
}

// add counts one answer.
func (t *table) add(e *event) {
	t.total++
	c := t.last
	if c == nil || c.addr != e.addr {
		c = t.byAddr[e.addr]
		if c == nil {
			c = t.admit(e.addr)
		}
		t.last = c
	}
	c.count++
	heap.Fix(&t.heap, c.idx)
	rc := rcodeClass(e.rcode)
	c.rcodes[rc]++
	if c.ns != nil {
		c.ns.answers++
		switch rc {
		case rcNXDomain:
			c.ns.nxdomain++
		case rcServFail:
			c.ns.servfail++
		}
	}
	if e.hit {
		c.hits++
	} else {
		c.misses++
		c.missUS += uint64(e.latency)
	}
	if e.name != "" {
		c.names.add(e.name)
	}
}

// admit gives addr a slot: a free one, or the one with the smallest count, whose count it inherits as its
// overcount. Its count is then incremented by add.
func (t *table) admit(addr [16]byte) *client {
	var c *client
	var over uint64
	if n := len(t.heap); n < len(t.slots) {
		c = &t.slots[n]
		c.idx = n
		heap.Push(&t.heap, c)
	} else {
		c = t.heap[0]
		delete(t.byAddr, c.addr)
		over = c.count
		idx := c.idx
		*c = client{idx: idx}
	}
	c.addr, c.count, c.over, c.since = addr, over, over, t.now()
	c.prev[0] = over // its rate starts now, not from the count it inherits
	c.ns = t.nsFor(addr)
	t.byAddr[addr] = c
	return c
}

// roll closes a window of elapsed: each client's rates are what it asked in it.
func (t *table) roll(elapsed time.Duration) {
	secs := elapsed.Seconds()
	if secs <= 0 {
		return
	}
	for i := range t.heap {
		c := t.heap[i]
		cur := [4]uint64{c.count, c.rcodes[rcNXDomain], c.rcodes[rcServFail], c.hits}
		c.rate = float64(cur[0]-c.prev[0]) / secs
		c.nxRate = float64(cur[1]-c.prev[1]) / secs
		c.sfRate = float64(cur[2]-c.prev[2]) / secs
		c.hitRate = float64(cur[3]-c.prev[3]) / secs
		c.prev = cur
	}
}

// tailBound is the most answers any client not in the table got: the smallest count once it is full.
func (t *table) tailBound() uint64 {
	if len(t.heap) < len(t.slots) {
		return 0
	}
	return t.heap[0].count
}

// add counts name in a client's names: space-saving again, over NamesPerClient.
func (ns *topNames) add(name string) {
	low := 0
	for i := range ns {
		switch {
		case ns[i].name == name:
			ns[i].count++
			return
		case ns[i].count == 0:
			ns[i] = nameCount{name: name, count: 1}
			return
		case ns[i].count < ns[low].count:
			low = i
		}
	}
	over := ns[low].count
	ns[low] = nameCount{name: name, count: over + 1, over: over}
}

// minHeap orders slots by count, the smallest first (container/heap).
type minHeap []*client

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *minHeap) Push(x any) { *h = append(*h, x.(*client)) }
func (h *minHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
