package clients

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// publishTop is how many clients each window's snapshot hands its publishers (the metrics' gauge set).
const publishTop = 10

// Snapshot is the table as `-top` and the metrics see it: the heaviest clients first.
type Snapshot struct {
	At time.Time `json:"at"`
	// Window is the rate window's length in seconds: every rate is per second over the last one closed.
	Window float64 `json:"windowSeconds"`
	// Answers is every answer counted since start, Dropped those the writers could not record (a ring was
	// full: the drain fell behind).
	Answers uint64 `json:"answers"`
	Dropped uint64 `json:"dropped"`
	// Tracked is how many clients the table holds, of Capacity; TailBound is the most answers any client
	// not in it got (0 while the table has room: then every client is in it).
	Tracked   int      `json:"tracked"`
	Capacity  int      `json:"capacity"`
	TailBound uint64   `json:"tailBound"`
	Clients   []Client `json:"clients"`
	// Namespaces are the answers per namespace of the clients' pods, with pod identity (namespaces.go).
	Namespaces map[string]Namespace `json:"namespaces,omitempty"`
}

// Client is one source address.
type Client struct {
	Addr string `json:"addr"`
	// Name is who the address is when pod identity is on (-pod-identity): "namespace/pod", or "host network
	// (...)" for the node's own addresses, which its host-network pods share; "" when unknown or off.
	Name string `json:"name,omitempty"`
	// Since is when it entered the table; its counts run from there.
	Since time.Time `json:"since"`
	// Answers may overstate what it was answered by at most Overcount (the count of the client it replaced).
	Answers   uint64 `json:"answers"`
	Overcount uint64 `json:"overcount"`
	NoError   uint64 `json:"noerror"`
	NXDomain  uint64 `json:"nxdomain"`
	ServFail  uint64 `json:"servfail"`
	Refused   uint64 `json:"refused"`
	Other     uint64 `json:"other"`
	Hits      uint64 `json:"hits"`
	Misses    uint64 `json:"misses"`
	// MissLatencyMs is the misses' mean time to answer.
	MissLatencyMs float64 `json:"missLatencyMs"`
	// Rates over the last window, per second.
	Rate     float64 `json:"rate"`
	NXRate   float64 `json:"nxdomainRate"`
	SFRate   float64 `json:"servfailRate"`
	HitRate  float64 `json:"hitRate"`
	TopNames []Name  `json:"topNames"`
}

// Name is one of a client's most asked names.
type Name struct {
	Name      string `json:"name"`
	Count     uint64 `json:"count"`
	Overcount uint64 `json:"overcount,omitempty"`
}

// Snapshot returns the n heaviest clients (by rate in the last window, then by answers), after draining what
// the writers published.
func (a *Accounting) Snapshot(n int) Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drain()
	return a.snapshot(n)
}

// snapshot is Snapshot with a.mu held and the rings drained.
func (a *Accounting) snapshot(n int) Snapshot {
	t := a.t
	s := Snapshot{At: a.now(), Window: window.Seconds(), Answers: t.total, Dropped: t.dropped, Tracked: len(t.heap),
		Capacity: len(t.slots), TailBound: t.tailBound(), Namespaces: t.namespaces()}
	order := slices.Clone(t.heap)
	slices.SortFunc(order, func(x, y *client) int {
		if c := cmp.Compare(y.rate, x.rate); c != 0 {
			return c
		}
		return cmp.Compare(y.count, x.count)
	})
	for _, c := range order[:min(n, len(order))] {
		cl := c.export()
		if a.namer != nil {
			cl.Name = a.namer(netip.AddrFrom16(c.addr).Unmap())
		}
		s.Clients = append(s.Clients, cl)
	}
	return s
}

func (c *client) export() Client {
	out := Client{Addr: netip.AddrFrom16(c.addr).Unmap().String(), Since: c.since, Answers: c.count, Overcount: c.over,
		NoError: c.rcodes[rcNoError], NXDomain: c.rcodes[rcNXDomain], ServFail: c.rcodes[rcServFail],
		Refused: c.rcodes[rcRefused], Other: c.rcodes[rcOther], Hits: c.hits, Misses: c.misses,
		Rate: c.rate, NXRate: c.nxRate, SFRate: c.sfRate, HitRate: c.hitRate, TopNames: []Name{}}
	if c.misses > 0 {
		out.MissLatencyMs = float64(c.missUS) / float64(c.misses) / 1000
	}
	for _, nc := range c.names {
		if nc.count > 0 {
			out.TopNames = append(out.TopNames, Name{Name: nc.name, Count: nc.count, Overcount: nc.over})
		}
	}
	slices.SortFunc(out.TopNames, func(x, y Name) int { return cmp.Compare(y.Count, x.Count) })
	return out
}
