package nftconn

import (
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// Every request on our socket runs under a deadline no further than RequestTimeout away, so a wedged
// netlink socket fails a call instead of hanging the reconcile loop, a scrape or shutdown.
func TestEveryCallSetsADeadline(t *testing.T) {
	c, k := fakeConn(t)
	rs := nft.Build(goldenCases[0].spec)
	calls := []struct {
		name string
		do   func() error
	}{
		{"Apply", func() error { return c.Apply(rs) }},
		{"Instances", func() error { _, err := c.Instances(); return err }},
		{"TableCounters", func() error { _, err := c.TableCounters(c.Table(), nft.OurChains()...); return err }},
		{"Teardown", func() error { return c.Teardown() }},
	}
	for _, call := range calls {
		before := len(k.deadlines)
		start := time.Now()
		if err := call.do(); err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		if len(k.deadlines) == before {
			t.Errorf("%s set no deadline", call.name)
			continue
		}
		d := k.deadlines[len(k.deadlines)-1]
		if d.Before(start) || d.After(time.Now().Add(RequestTimeout)) {
			t.Errorf("%s: deadline %v is not within (now, now+%v]", call.name, d.Sub(start), RequestTimeout)
		}
	}
}
