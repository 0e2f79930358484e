package main

import (
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/miekg/dns"
)

// serve answers every A question with one address, over UDP and TCP: the upstream behind a stub domain in the
// kube-dns ConfigMap test.
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "", "listen address host:port")
	a := fs.String("a", "", "the address every A answer carries")
	if err := fs.Parse(args); err != nil || *addr == "" || net.ParseIP(*a).To4() == nil {
		fmt.Fprintln(os.Stderr, "usage: dnsq serve -addr HOST:PORT -a IPv4")
		return 2
	}
	ip := net.ParseIP(*a).To4()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: ip})
		}
		w.WriteMsg(m)
	})
	errs := make(chan error, 2)
	for _, n := range []string{"udp", "tcp"} {
		go func() { errs <- (&dns.Server{Addr: *addr, Net: n, Handler: h}).ListenAndServe() }()
	}
	err := <-errs
	fmt.Fprintln(os.Stderr, "serve:", err)
	return 1
}
