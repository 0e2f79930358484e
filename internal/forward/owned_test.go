package forward_test

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

// taker is a writer that takes answers over (chain.OwnedWriter), as our cache's does.
type taker struct {
	discard
	owned, written int
}

func (t *taker) WriteOwnedMsg(*dns.Msg) error { t.owned++; return nil }
func (t *taker) WriteMsg(*dns.Msg) error      { t.written++; return nil }

// The forward hands its answer over to a writer that takes it: it is unpacked for this query alone.
func TestAnswerHandedOver(t *testing.T) {
	addr := answering(t)
	for _, opt := range []string{"force_tcp", "prefer_udp"} {
		h, err := instance(t, ourSetup, "forward . "+addr+" {\n"+opt+"\n}")
		if err != nil {
			t.Fatal(err)
		}
		w := &taker{}
		r := new(dns.Msg)
		r.SetQuestion("handed.example.", dns.TypeA)
		if rc, err := h.ServeDNS(context.Background(), w, r); err != nil || rc != 0 {
			t.Fatal(rc, err)
		}
		if w.owned != 1 || w.written != 0 {
			t.Errorf("%s: %d answers handed over, %d written, want 1 and 0", opt, w.owned, w.written)
		}
	}
}
