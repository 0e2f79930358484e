package clients

import (
	"net/netip"
	"strings"
)

// With pod identity (SetNamer), answers are also counted per namespace of the client's pod: counters bounded by
// the namespaces of the node's pods, plus "host network" (the node's own addresses) and "unknown" (an address
// no pod on the node has: a pod not yet seen, a spoofed source). A client's namespace is looked up when it
// enters the table and again at each window (pods come and go), never per answer. A namespace no client in the
// table belongs to any more is dropped at the window's close (its counters start again from zero if it
// returns, as a restarted process's do), so the set stays bounded by the table's clients.

// nsCount is one namespace's answers.
type nsCount struct {
	answers, nxdomain, servfail uint64
}

// Namespace is one namespace's counters in a snapshot.
type Namespace struct {
	Answers  uint64 `json:"answers"`
	NXDomain uint64 `json:"nxdomain"`
	ServFail uint64 `json:"servfail"`
}

// namespaceOf is the namespace a name from the namer (podwatch) counts under.
func namespaceOf(name string) string {
	switch {
	case name == "":
		return "unknown"
	case strings.HasPrefix(name, "host network"):
		return "host network"
	}
	ns, _, _ := strings.Cut(name, "/")
	return ns
}

// nsFor is the counters addr's answers go to; nil without a namer. a.mu held.
func (t *table) nsFor(addr [16]byte) *nsCount {
	if t.namer == nil {
		return nil
	}
	ns := namespaceOf(t.namer(netip.AddrFrom16(addr).Unmap()))
	c := t.byNS[ns]
	if c == nil {
		c = &nsCount{}
		t.byNS[ns] = c
	}
	return c
}

// renameAll looks every client's namespace up again and drops the namespaces none belongs to; at a window's
// close.
func (t *table) renameAll() {
	if t.namer == nil {
		return
	}
	used := map[*nsCount]bool{}
	for _, c := range t.heap {
		c.ns = t.nsFor(c.addr)
		used[c.ns] = true
	}
	for k, c := range t.byNS {
		if !used[c] {
			delete(t.byNS, k)
		}
	}
}

func (t *table) namespaces() map[string]Namespace {
	if t.namer == nil {
		return nil
	}
	out := make(map[string]Namespace, len(t.byNS))
	for k, c := range t.byNS {
		out[k] = Namespace{Answers: c.answers, NXDomain: c.nxdomain, ServFail: c.servfail}
	}
	return out
}
