// Package memcheck weighs a Corefile's worst case against the memory limit of the agent's cgroup, so that a
// cache sized beyond what the limit holds is said at start and on every reload instead of being found by the
// OOM killer (the most common way node caches get restarted: four server blocks of 9984 success + 9984 denial
// entries under a 200Mi limit). It reads two files (CgroupLimit) and otherwise computes.
//
// May touch: the cgroup's memory files under /proc/self or /sys/fs/cgroup, read-only.
package memcheck

import (
	"fmt"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/connlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
)

// Baseline is the agent with CoreDNS and empty caches: about 30 MiB resident idle, with headroom for a burst of
// queries in flight (bounded per forward by corefile.ForwardMaxConcurrent).
const Baseline = 64 << 20

// TCPWorstCase is the TCP connections CoreDNS may hold under connlimit's default caps (the agent's), each at its
// worst: connlimit.Default().WorstCaseBytes().
const TCPWorstCase int64 = connlimit.DefaultTotal * connlimit.ConnWorstCaseBytes

// ListenersWorstCase is the connections of every listener the agent opens itself (health, its metrics,
// CoreDNS's metrics: internal/listenlimit), each bound full. Each kind is bounded in all its addresses together,
// so it does not depend on the Corefile.
func ListenersWorstCase() int64 { return listenlimit.WorstCaseBytes() }

// StoreWorstCase is the fast path's store beside one `cache` directive at its fullest (a store is per listener
// address, for every block on it, so one per directive over-counts in the usual Corefile: never under).
const StoreWorstCase = fastpath.StoreWorstCaseBytes

// ClientsWorstCase is the per-client accounting (internal/clients) with the fast path's readers of caches
// `cache` directives (counted as stores are: one listener address per directive, which over-counts in the
// usual Corefile). It is counted whether or not the environment turns the accounting off: never under.
// Without a cache nothing is counted (the handler stands in front of caches), and the empty table is within
// Baseline.
func ClientsWorstCase(caches int) int64 {
	if caches == 0 {
		return 0
	}
	return clients.WorstCaseBytes(caches * fastpath.MaxSocketsPerAddr)
}

// Estimate is a Corefile's worst case against a limit.
type Estimate struct {
	Caches    int   // `cache` directives
	Entries   int64 // their success + denial capacities
	WorstCase int64 // bytes: Baseline + TCPWorstCase + ListenersWorstCase() + each cache's Entries × dnscache.KeyWorstCaseBytes + Caches × StoreWorstCase + ClientsWorstCase(Caches)
	Limit     int64 // the cgroup's memory limit; 0 for none
}

// Fits says whether the worst case stays under the limit (always, without one).
func (e Estimate) Fits() bool { return e.Limit == 0 || e.WorstCase <= e.Limit }

// New computes the worst case of caches against limit.
func New(caches []Cache, limit int64) Estimate {
	e := Estimate{Caches: len(caches), Limit: limit}
	e.WorstCase = Baseline + TCPWorstCase + ListenersWorstCase() + int64(e.Caches)*StoreWorstCase + ClientsWorstCase(e.Caches)
	for _, c := range caches {
		e.Entries += c.Success + c.Denial
		e.WorstCase += (c.Success + c.Denial) * dnscache.KeyWorstCaseBytes(c.PreferPositive)
	}
	return e
}

// MiB formats bytes for a log line.
func MiB(b int64) string { return fmt.Sprintf("%.0fMi", float64(b)/(1<<20)) }
