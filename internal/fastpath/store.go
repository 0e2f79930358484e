package fastpath

import (
	"bytes"
	"hash/maphash"
	"sync"
	"time"
	"unsafe"
)

// entry is one answer CoreDNS gave from its cache, ready to be sent again. Entries are immutable once stored.
type entry struct {
	query   []byte // the query from its flags on: everything but the ID
	answer  []byte
	ttls    []uint16  // offsets of the TTL fields in answer (every RR but OPT)
	ttl     uint32    // the smallest of them when learned
	learned time.Time // when CoreDNS wrote answer
	size    float64   // the response size CoreDNS's prometheus plugin records for it

	// The cache plugin's item the answer was built from, the cache holding it, and the other cache, which must
	// not hold the key (CoreDNS looks in the denial cache first and lets a positive item shadow a SERVFAIL).
	key       uint64
	item      unsafe.Pointer
	in, other *itemCache
	series    *series
}

// store holds the entries of one view, sharded: at most maxEntries, and never more than its blocks' caches hold
// together. Entries that can no longer be served (expired, or their item gone from the cache plugin) are swept
// every sweepEvery, and first when a shard is full; then an arbitrary one goes, as in the cache plugin.
type store struct {
	seed   maphash.Seed
	shards [storeShards]storeShard
}

const (
	storeShards = 64
	// maxEntries bounds the memory the fast path adds to CoreDNS's: ~300 bytes an entry, and the cache item
	// each one keeps reachable until it is swept; the GC's headroom doubles whatever stays live. A node's hot
	// names (with their search-path NXDOMAINs) fit, and a query whose answer is not kept is simply CoreDNS's.
	// 4096 measured ~1.4 MiB more anonymous memory than CoreDNS alone in the bench's soak, 2048 ~0.8-2.7 MiB
	// over ten minutes with a 5 s sweep.
	maxEntries = 1024
	// sweepEvery: under a miss-heavy load the cache plugin evicts most items within seconds, and an entry
	// keeps its evicted item alive until swept. A sweep of a full store costs ~0.1 ms.
	sweepEvery = time.Second
)

type storeShard struct {
	sync.RWMutex
	m   map[uint64]*entry
	max int
}

func newStore(capacity int) *store {
	s := &store{seed: maphash.MakeSeed()}
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

func (s *store) put(e *entry) {
	h := maphash.Bytes(s.seed, e.query)
	sh := &s.shards[h%storeShards]
	sh.Lock()
	if _, ok := sh.m[h]; !ok && len(sh.m) >= sh.max {
		sh.sweep(time.Now())
		for k := range sh.m {
			if len(sh.m) < sh.max {
				break
			}
			delete(sh.m, k)
		}
	}
	sh.m[h] = e
	sh.Unlock()
}

// sweep drops the entries that can no longer be served.
func (s *store) sweep(now time.Time) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.Lock()
		sh.sweep(now)
		sh.Unlock()
	}
}

func (sh *storeShard) sweep(now time.Time) {
	for k, e := range sh.m {
		if _, fresh := e.fresh(now); !fresh || !e.cached() {
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
