// Package memcheck weighs a Corefile's worst case against the memory limit of the agent's cgroup, so that a
// cache sized beyond what the limit holds is said at start and on every reload instead of being found by the
// OOM killer (the most common way node caches get restarted: four server blocks of 9984 success + 9984 denial
// entries under a 200Mi limit). It reads two files (CgroupLimit) and otherwise computes.
package memcheck

import (
	"fmt"
)

// The worst case of one entry, in one place until the caches' own packages say it (the lead joins them).
const (
	// CacheEntryWorstCase bounds one entry of CoreDNS's cache: the item keeps the answer's records as Go values
	// (each RR a few hundred bytes) plus its key and bookkeeping. internal/dnscache will expose its own bound.
	CacheEntryWorstCase = 4 << 10
	// StoreWorstCase bounds the fast path's store for one `cache` directive: at most 1024 entries
	// (internal/fastpath maxEntries), each an answer of up to a UDP payload of 4096 bytes plus its key.
	StoreWorstCase = 1024 * (4096 + 256)
	// Baseline is the agent with CoreDNS and empty caches: about 30 MiB resident idle, with headroom for a
	// burst of queries in flight (bounded per forward by corefile.ForwardMaxConcurrent).
	Baseline = 64 << 20
)

// Estimate is a Corefile's worst case against a limit.
type Estimate struct {
	Caches    int   // `cache` directives
	Entries   int64 // their success + denial capacities
	WorstCase int64 // bytes: Baseline + Entries × CacheEntryWorstCase + Caches × StoreWorstCase
	Limit     int64 // the cgroup's memory limit; 0 for none
}

// Fits says whether the worst case stays under the limit (always, without one).
func (e Estimate) Fits() bool { return e.Limit == 0 || e.WorstCase <= e.Limit }

// New computes the worst case of caches against limit.
func New(caches []Cache, limit int64) Estimate {
	e := Estimate{Caches: len(caches), Limit: limit}
	for _, c := range caches {
		e.Entries += c.Success + c.Denial
	}
	e.WorstCase = Baseline + e.Entries*CacheEntryWorstCase + int64(e.Caches)*StoreWorstCase
	return e
}

// MiB formats bytes for a log line.
func MiB(b int64) string { return fmt.Sprintf("%.0fMi", float64(b)/(1<<20)) }
