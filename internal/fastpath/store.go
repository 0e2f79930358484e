package fastpath

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
)

// entry is one answer CoreDNS gave from our cache, ready to be sent again. Entries are immutable once stored.
type entry struct {
	query  []byte   // the query from its flags on: everything but the ID
	answer []byte   // at most dnscache.MaxMsgBytes
	ttls   []uint16 // offsets of the TTL fields in answer (every RR but OPT; the cache gives them one TTL)
	sizeAt point    // the response size CoreDNS's prometheus plugin records for it, in series.size
	reqAt  point    // the request size it records (the query's length), in series.reqSize
	hit    *dnscache.Hit
	series *series
	name   string // the question's name, lower case, and the answer's rcode: what internal/clients counts a hit by
	rcode  int
}

// EntryWorstCaseBytes is the most memory one stored answer takes: its query (maxQuery) and answer
// (dnscache.MaxMsgBytes), the TTL offsets (2 bytes for each record, of at least 11 bytes), the struct, the
// Hit and its question (under 1 KiB), and the cache entry the Hit keeps reachable until the next sweep even
// when the cache evicted it. A store holds at most maxEntries of them.
const EntryWorstCaseBytes = maxQuery + dnscache.MaxMsgBytes + 2*(dnscache.MaxMsgBytes/11) + 1024 +
	dnscache.EntryWorstCaseBytes

// StoreWorstCaseBytes is the most memory one store (one listener address's) takes: maxEntries of the worst,
// and its doorkeeper.
const StoreWorstCaseBytes = maxEntries*EntryWorstCaseBytes + seenSlots*8

// store holds the entries of one view, sharded: at most maxEntries, and never more than its blocks' caches hold
// together. Entries that can no longer be served (expired, or their item gone from the cache plugin) are swept
// every sweepEvery, and first when a shard is full; then an arbitrary one goes, as in the cache plugin.
//
// An answer is stored the second time CoreDNS answers its query from the cache, not the first (admit): a name
// asked once more before the cache evicts it costs the store nothing. In the bench's memory soak (40,000 names
// at 5,000 qps against 9,984 cache entries, about 2.5 queries per name) most answers are asked once from the
// cache and never again, and storing each filled the store with entries that answered nothing.
type store struct {
	seed   maphash.Seed
	shards [storeShards]storeShard
	seen   [seenSlots]atomic.Uint64 // the doorkeeper: hashes of queries CoreDNS answered once from the cache
	// stored has a token after put: the sweeper, paused while the store is empty, waits for it.
	stored chan struct{}
}

const (
	storeShards = 64
	// maxEntries bounds the memory the fast path adds to CoreDNS's: a typical entry is ~300 bytes and the
	// cache entry it keeps reachable until it is swept, the worst EntryWorstCaseBytes; the GC's headroom
	// doubles whatever stays live. A node's hot names (with their search-path NXDOMAINs) fit, and a query
	// whose answer is not kept is simply CoreDNS's.
	// 4096 measured ~1.4 MiB more anonymous memory than CoreDNS alone in the bench's soak, 2048 ~0.8-2.7 MiB
	// over ten minutes with a 5 s sweep.
	maxEntries = 1024
	// sweepEvery: under a miss-heavy load the cache plugin evicts most items within seconds, and an entry
	// keeps its evicted item alive until swept. A sweep of a full store costs ~0.1 ms.
	sweepEvery = time.Second
	// seenSlots is the doorkeeper's size: a query's hash in its slot says it was answered from the cache
	// before. Two queries sharing a slot each push the other out, which only delays storing either.
	seenSlots = 4096
)

type storeShard struct {
	sync.RWMutex
	m   map[uint64]*entry
	max int
}

func newStore(capacity int) *store {
	s := &store{seed: maphash.MakeSeed(), stored: make(chan struct{}, 1)}
	for i := range s.shards {
		s.shards[i] = storeShard{m: map[uint64]*entry{}, max: max(min(capacity, maxEntries)/storeShards, 4)}
	}
	return s
}

func (s *store) get(q []byte) *entry {
	h := maphash.Bytes(s.seed, q)
	sh := &s.shards[h%storeShards]
	sh.RLock()
	e := sh.m[h]
	sh.RUnlock()
	if e == nil || !bytes.Equal(e.query, q) {
		return nil
	}
	return e
}

// admit reports whether the answer to q (the query from its flags on) may be stored: CoreDNS answered q from
// its cache before. Otherwise it remembers q, and the next answer from the cache is stored. Two answers to q
// on concurrent goroutines (the miss workers serve each query on its own) are a first and a second too: only
// one of them swaps the slot, and the other then finds it.
func (s *store) admit(q []byte) bool {
	h := maphash.Bytes(s.seed, q) | 1 // never 0, an empty slot
	slot := &s.seen[h%seenSlots]
	for {
		old := slot.Load()
		if old == h {
			return true
		}
		if slot.CompareAndSwap(old, h) {
			return false
		}
	}
}

func (s *store) put(now time.Time, e *entry) {
	h := maphash.Bytes(s.seed, e.query)
	sh := &s.shards[h%storeShards]
	sh.Lock()
	if _, ok := sh.m[h]; !ok && len(sh.m) >= sh.max {
		sh.sweep(now)
		for k := range sh.m {
			if len(sh.m) < sh.max {
				break
			}
			delete(sh.m, k)
		}
	}
	sh.m[h] = e
	sh.Unlock()
	select {
	case s.stored <- struct{}{}:
	default:
	}
}

// sweep drops the entries that can no longer be served, and returns how many are left.
func (s *store) sweep(now time.Time) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.Lock()
		sh.sweep(now)
		n += len(sh.m)
		sh.Unlock()
	}
	return n
}

func (sh *storeShard) sweep(now time.Time) {
	for k, e := range sh.m {
		if !e.hit.Valid(now) {
			delete(sh.m, k)
		}
	}
}

func (s *store) len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].RLock()
		n += len(s.shards[i].m)
		s.shards[i].RUnlock()
	}
	return n
}
