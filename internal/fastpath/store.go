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

// store holds the entries of one view, sharded, never more than its blocks' cache capacity together. When a shard
// is full, the entries that can no longer be served (expired, or their item gone from the cache plugin) go
// first, then an arbitrary one, as in the cache plugin.
type store struct {
	seed   maphash.Seed
	shards [storeShards]storeShard
}

const storeShards = 64

type storeShard struct {
	sync.RWMutex
	m   map[uint64]*entry
	max int
}

func newStore(capacity int) *store {
	s := &store{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i] = storeShard{m: map[uint64]*entry{}, max: max(capacity/storeShards, 4)}
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
		now := time.Now()
		for k, old := range sh.m {
			if _, fresh := old.fresh(now); !fresh || !old.cached() {
				delete(sh.m, k)
			}
		}
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

func (s *store) len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].RLock()
		n += len(s.shards[i].m)
		s.shards[i].RUnlock()
	}
	return n
}
