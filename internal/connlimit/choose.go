package connlimit

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// Limits are the caps. The defaults hold any real client's TCP use (a stub resolver opens one connection for
// a truncated answer and closes it) with room, and keep the worst case small: Total × ConnWorstCaseBytes.
type Limits struct {
	PerSource int // connections one source address may hold
	Total     int // connections all sources together may hold
}

// The caps the agent runs with (Default).
const (
	DefaultPerSource = 100
	DefaultTotal     = 1000
)

// Default returns the caps the agent runs with: DefaultPerSource and DefaultTotal.
func Default() Limits { return Limits{PerSource: DefaultPerSource, Total: DefaultTotal} }

// ConnWorstCaseBytes is what one held connection is counted for in the memory check: 7.4 KiB of RSS measured
// (goroutine, buffers; test/e2e/outage TestTCPConnectionFlood) and the kernel's socket, charged to the cgroup.
const ConnWorstCaseBytes = 16 << 10

// WorstCaseBytes is the most the connections take under these caps.
func (l Limits) WorstCaseBytes() int64 { return int64(l.Total) * ConnWorstCaseBytes }

// conn is one connection on a listener's address.
type conn struct {
	family        uint8
	id            diagID // in the kernel's socket table
	inode         uint32 // 0 while in a listener's queue
	fd            int    // ours for inode, when a pass looked (-1: not found)
	local, remote netip.AddrPort
	idle          time.Duration // since data was last received
}

// choose returns the connections to close so that conns fit lim: each source's newcomers and idlest over
// PerSource, then, while more than Total remain, the same of the source holding the most. A newcomer is a
// connection still in a listener's queue: closing it is the reset at accept that the fast path's listeners
// give (internal/listenlimit), which may be about to accept it; closing an accepted connection in its place
// would let the newcomer in and cut a query its client had already been answered on. It does no I/O.
func choose(conns []conn, lim Limits) []conn {
	bySource := map[netip.Addr][]conn{}
	for _, c := range conns {
		bySource[c.remote.Addr()] = append(bySource[c.remote.Addr()], c)
	}
	var out []conn
	total := 0
	var sources [][]conn
	for _, cs := range bySource {
		// Accepted and busiest first: what is closed is the queued, then what has waited longest for its
		// next query.
		slices.SortFunc(cs, func(a, b conn) int {
			if qa, qb := a.inode == 0, b.inode == 0; qa != qb {
				if qa {
					return 1
				}
				return -1
			}
			return cmp.Compare(a.idle, b.idle)
		})
		if over := len(cs) - lim.PerSource; over > 0 {
			out = append(out, cs[len(cs)-over:]...)
			cs = cs[:len(cs)-over]
		}
		total += len(cs)
		sources = append(sources, cs)
	}
	for total > lim.Total {
		big := 0
		for i := range sources {
			if len(sources[i]) > len(sources[big]) {
				big = i
			}
		}
		cs := sources[big]
		out = append(out, cs[len(cs)-1])
		sources[big] = cs[:len(cs)-1]
		total--
	}
	return out
}
