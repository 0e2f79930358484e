package fastpath_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Differential against CoreDNS alone: two CoreDNS instances with the same Corefile and upstream, one with a
// fast path, each asked the same seed queries (so both caches hold them and the fast path has learned them).
// For any datagram, the fast path either leaves it to CoreDNS (which then answers it as it would alone) or
// answers it with what CoreDNS alone answers: the same message, TTLs no higher. Seeds include EDNS options,
// the DO and CD bits, mixed case, a compressed question and the hostile shapes (truncated, a compression
// loop, a response, trailing bytes).
func FuzzHitAnswersLikeCoreDNS(f *testing.F) {
	up := startUpstream(f)
	body := "cache 30\n forward . " + up.Addr
	p, fast := startCoreDNS(f, body)
	alone := startCoreDNSAlone(f, body)
	valid, hostile := hitSeeds(f)
	for _, q := range valid {
		for range 3 { // the second and third are answered from the cache: learned
			exchangeRaw(f, fast, q)
			exchangeRaw(f, alone, q)
		}
	}
	// The fast path learns on the miss worker's goroutine just after CoreDNS wrote the answer, so the last
	// answer may be back before it is stored: wait for all but the compressed question (the fast path keys
	// the bytes CoreDNS learned from).
	learned := func() int {
		n := 0
		for _, q := range valid {
			if _, ok := p.Build(fast, q, nil); ok {
				n++
			}
		}
		return n
	}
	testenv.Eventually(f, 2*time.Second, fmt.Sprintf("the fast path to learn all but one of the %d seed queries", len(valid)),
		func() bool { return learned() >= len(valid)-1 })
	for _, q := range valid {
		f.Add(q)
	}
	for _, q := range hostile {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		got, ok := p.Build(fast, q, nil)
		if !ok {
			return // CoreDNS's, with CoreDNS's own handling
		}
		want := exchangeRaw(t, alone, q)
		if want == nil {
			t.Fatalf("the fast path answers %x, CoreDNS alone does not", q)
		}
		var g, w dns.Msg
		if err := g.Unpack(got); err != nil {
			t.Fatalf("the fast path's answer does not unpack: %v", err)
		}
		if err := w.Unpack(want); err != nil {
			t.Fatalf("CoreDNS's answer does not unpack: %v", err)
		}
		gt, wt := zeroTTLs(&g), zeroTTLs(&w)
		if g.String() != w.String() {
			t.Fatalf("query %x:\nfast path:\n%v\ncoredns alone:\n%v", q, &g, &w)
		}
		for i := range gt {
			if gt[i] > wt[i] {
				t.Fatalf("record %d: TTL %d from the fast path, %d from CoreDNS alone", i, gt[i], wt[i])
			}
		}
	})
}

// startCoreDNSAlone starts CoreDNS from a server block's body without a fast path and returns its UDP address.
func startCoreDNSAlone(tb testing.TB, body string) netip.AddrPort {
	tb.Helper()
	in, err := dnsserver.Input([]byte(".:0 {\n bind 127.0.0.1\n"+body+"\n}\n"), "Corefile")
	if err != nil {
		tb.Fatal(err)
	}
	inst, err := caddy.Start(in)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		inst.ShutdownCallbacks()
		inst.Stop()
	})
	for _, sl := range inst.Servers() {
		if a, ok := sl.LocalAddr().(*net.UDPAddr); ok {
			return a.AddrPort()
		}
	}
	tb.Fatal("no UDP listener")
	return netip.AddrPort{}
}

// exchangeRaw sends q as it is and returns the answer, or nil if none comes within a second.
func exchangeRaw(tb testing.TB, server netip.AddrPort, q []byte) []byte {
	tb.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(q); err != nil {
		tb.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// zeroTTLs sets the TTL of every record but OPT to 0 and returns the TTLs it found, in order.
func zeroTTLs(m *dns.Msg) []uint32 {
	var ttls []uint32
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				ttls = append(ttls, h.Ttl)
				h.Ttl = 0
			}
		}
	}
	return ttls
}

// hitSeeds are the queries both instances are primed with, and the hostile ones, all the fuzzer's seeds.
func hitSeeds(tb testing.TB) (valid, hostile [][]byte) {
	q := func(name string, edit func(*dns.Msg)) []byte {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Id = 0x1234
		if edit != nil {
			edit(m)
		}
		b, err := m.Pack()
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	plain := q("fuzz.example.", nil)
	edns := q("edns.example.", func(m *dns.Msg) {
		m.SetEdns0(1232, false)
		o := m.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"},
			&dns.EDNS0_PADDING{Padding: make([]byte, 12)})
	})
	do := q("do.example.", func(m *dns.Msg) { m.SetEdns0(4096, true) })
	cd := q("cd.example.", func(m *dns.Msg) { m.CheckingDisabled = true })
	mixed := q("MiXeD.Example.", nil)
	// The question's name as a pointer to a copy of it after the question (CoreDNS unpacks it).
	compressed := append(append([]byte(nil), plain[:12]...), 0xC0, byte(12+2+4))
	compressed = append(compressed, plain[len(plain)-4:]...)
	compressed = append(compressed, plain[12:len(plain)-4]...)
	loop := append(append([]byte(nil), plain[:12]...), 0xC0, 12)
	loop = append(loop, plain[len(plain)-4:]...)
	response := append([]byte(nil), plain...)
	response[2] |= 0x80
	return [][]byte{plain, edns, do, cd, mixed, compressed},
		[][]byte{loop, response, plain[:len(plain)-2], plain[:11], append(append([]byte(nil), plain...), 0, 0)}
}
