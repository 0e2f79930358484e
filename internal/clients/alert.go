package clients

import (
	"net/netip"
	"time"

	"go.uber.org/zap"
)

// A client is logged (one warning) when, over a window, it crosses alertRate answers a second, or an
// NXDOMAIN share of alertNXShare at alertNXMinRate or more (an `ndots:5` search path turns one lookup of an
// outside name into up to 10 queries, most of them NXDOMAIN). Sampled: a client is logged again only after
// alertEvery, and a window logs at most alertsPerWindow clients (100,000 spoofed sources cannot flood the log).
const (
	alertRate       = 1000
	alertNXShare    = 0.5
	alertNXMinRate  = 50
	alertEvery      = time.Minute
	alertsPerWindow = 3
)

type alerts struct {
	log  *zap.Logger
	last map[[16]byte]time.Time // when each client was last logged; at most MaxClients, pruned by check
}

func newAlerts(log *zap.Logger) alerts { return alerts{log: log, last: map[[16]byte]time.Time{}} }

// check logs the clients over a threshold in the window just closed.
func (al *alerts) check(now time.Time, t *table, namer func(netip.Addr) string) {
	for addr, at := range al.last {
		if now.Sub(at) >= alertEvery {
			delete(al.last, addr)
		}
	}
	logged := 0
	for _, c := range t.heap {
		if logged == alertsPerWindow {
			return
		}
		nxShare := 0.0
		if c.rate > 0 {
			nxShare = c.nxRate / c.rate
		}
		var why string
		switch {
		case c.rate >= alertRate:
			why = "rate"
		case c.rate >= alertNXMinRate && nxShare >= alertNXShare:
			why = "nxdomain share"
		default:
			continue
		}
		if _, seen := al.last[c.addr]; seen {
			continue
		}
		al.last[c.addr] = now
		logged++
		addr := netip.AddrFrom16(c.addr).Unmap()
		name := ""
		if namer != nil {
			name = namer(addr)
		}
		al.log.Warn("client crossed a threshold", zap.String("client", addr.String()), zap.String("pod", name),
			zap.String("crossed", why), zap.Float64("rate", c.rate), zap.Float64("nxdomainShare", nxShare),
			zap.Float64("servfailRate", c.sfRate), zap.Strings("topNames", c.topNames()))
	}
}

func (c *client) topNames() []string {
	var out []string
	for _, n := range c.export().TopNames {
		out = append(out, n.Name)
	}
	return out
}
