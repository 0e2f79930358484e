// Package clients counts who is asking: every answer the agent gives, per source address, in a structure whose
// memory is bounded whatever the sources do.
//
// Two kinds of writers feed it. The fast path's readers (internal/fastpath) each own a Shard, a ring they write
// a hit into without a lock, a system call or an allocation, and publish once per batch (one atomic store).
// Everything CoreDNS answers (the fast path's misses, TCP, and every query when the fast path is off) is
// counted by a handler in front of each cached server block's chain (internal/dnsserver's clientsHandler, which
// calls Answer), through one shared ring behind a mutex: a miss already costs tens of microseconds. One goroutine (Run) drains the rings into the
// table, when a ring is half full and once a second, when it also closes the rate window and looks for clients
// worth a log line (alert.go).
//
// The table is a space-saving summary (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and
// top-k elements in data streams", 2005) of MaxClients addresses: a client already in it is counted exactly;
// a new one takes the place of the one with the fewest queries and inherits its count as an overcount bound.
// So the heaviest clients are always in it with exact counts since they entered (every client with more than
// 1/MaxClients of all queries is), and any client not in it asked at most the smallest count (the tail
// bound). Each client keeps its most asked names the same way, NamesPerClient of them. No Go library fitted:
// the ones found key by string (an allocation per query) and carry nothing per key.
//
// May touch: nothing.
package clients

import (
	"strings"
)

// Env set to "off" turns the accounting off: nothing is counted and nothing is served.
const Env = "NODELOCALDNS_CLIENTS"

// Enabled reports whether the environment leaves the accounting on.
func Enabled(getenv func(string) string) bool { return !strings.EqualFold(getenv(Env), "off") }

// Bounds. Together they make WorstCaseBytes.
const (
	// MaxClients is how many addresses the table holds: a node's pods (110 by default, 250 at most in the
	// usual limits) with room for churn, and host-network clients, several times over.
	MaxClients = 1024
	// NamesPerClient is how many of its most asked names a client keeps.
	NamesPerClient = 5
	// ringSize is one shard's ring: with a drain at half full, 512 answers between drains (a drain a few
	// milliseconds apart at the bench's 180,000 hits a second).
	ringSize = 1024
)

// maxName is the longest name a DNS query holds (RFC 1035 3.1, in presentation form with its dots).
const maxName = 255

// clientBytes is what one table slot takes at most: the struct (its names' headers within), each name's
// bytes, the map's entry (key, pointer and the swiss table's control byte, over a 7/8 load), and, with pod
// identity, a namespace's counters (after each window at most one namespace per slot, namespaces.go).
const clientBytes = clientStructBytes + NamesPerClient*maxName + (16+8+1)*8/7 + 8 + namespaceBytes

// namespaceBytes is one namespace's counters: its name (at most 63 bytes, a DNS label), its map entry and the
// counters.
const namespaceBytes = 63 + (16+8+1)*8/7 + 8 + 24

// clientStructBytes is unsafe.Sizeof(client{}) rounded up (a test checks it).
const clientStructBytes = 360

// ReaderShardBytes is a fast path reader's ring: its events. The name a hit's event holds is its fast path
// entry's (fastpath.StoreWorstCaseBytes counts it); an entry swept while its event waits keeps its name until
// the next drain, within a second, as it keeps its cache entry until the next sweep.
const ReaderShardBytes = ringSize * eventBytes

// HandlerShardBytes is the handler's ring at its fullest: its events, and each a name of its own (a miss's
// name is the question's, parsed for it).
const HandlerShardBytes = ringSize * (eventBytes + maxName)

// eventBytes is unsafe.Sizeof(event{}) (a test checks it).
const eventBytes = 40

// TableBytes is the table at its fullest.
const TableBytes = MaxClients * clientBytes

// WorstCaseBytes is the accounting at its fullest with readers fast path readers (a ring each) and the
// handler's shared ring.
func WorstCaseBytes(readers int) int64 {
	return TableBytes + HandlerShardBytes + int64(readers)*ReaderShardBytes
}
