package chain_test

import (
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/chain"
)

// taker records how each message reached it.
type taker struct {
	test.ResponseWriter
	owned, written *dns.Msg
}

func (t *taker) WriteOwnedMsg(m *dns.Msg) error { t.owned = m; return nil }
func (t *taker) WriteMsg(m *dns.Msg) error      { t.written = m; return nil }

// hiding is another plugin's writer around the taker: its WriteMsg is the only way through.
type hiding struct{ dns.ResponseWriter }

// A message goes over to a writer that takes it, and is written to any other, even one that hides a taker.
func TestWriteOwned(t *testing.T) {
	m := new(dns.Msg)
	tk := &taker{}
	if err := chain.WriteOwned(tk, m); err != nil || tk.owned != m || tk.written != nil {
		t.Errorf("to a taker: owned %p, written %p, want owned %p", tk.owned, tk.written, m)
	}
	behind := &taker{}
	if err := chain.WriteOwned(hiding{behind}, m); err != nil || behind.owned != nil || behind.written != m {
		t.Errorf("behind another writer: owned %p, written %p, want written %p", behind.owned, behind.written, m)
	}
	plain := &test.ResponseWriter{}
	if err := chain.WriteOwned(plain, m); err != nil {
		t.Errorf("to a plain writer: %v", err)
	}
}
