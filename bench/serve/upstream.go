package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The upstream is the cluster DNS every server forwards to. It is a small Go server inside this process, pinned
// with the load generator to loadCPU, rather than dnsmasq: the standard Corefile forwards with force_tcp, and
// dnsmasq serves TCP by forking one child per connection, at most 20 at a time, so cold-cache misses queued
// behind it and the mixed workload measured dnsmasq. This one answers like kube-dns: the hit names (and any
// name under missZone) with an A record and a long TTL, every other name under the domain NXDOMAIN with the
// zone's SOA, so that negative caching works as it does in a cluster.
type upstream struct {
	hits    map[string]net.IP
	soa     dns.RR
	servers []*dns.Server
}

func startUpstream(names int) (*upstream, error) {
	if err := sh("ip", "addr", "add", upstreamIP+"/32", "dev", "lo"); err != nil {
		return nil, err
	}
	u := &upstream{hits: map[string]net.IP{}}
	for i := range names {
		u.hits[dns.Fqdn(hitName(i))] = net.IPv4(10, 1, byte(i/250), byte(i%250+1))
	}
	soa, err := dns.NewRR(fmt.Sprintf("%s. %d IN SOA ns.dns.%s. hostmaster.%s. 1 7200 1800 86400 %d",
		domain, upstreamTTL, domain, domain, upstreamTTL))
	if err != nil {
		return nil, err
	}
	u.soa = soa
	for _, netw := range []string{"udp", "tcp"} {
		started := make(chan error, 1)
		// No limit on the queries a TCP connection carries, as CoreDNS serves kube-dns (core/dnsserver's
		// tcpMaxQueries is -1); miekg/dns's default of 128 would close every forward's connections in turn.
		s := &dns.Server{Addr: upstreamIP + ":53", Net: netw, Handler: u, MaxTCPQueries: -1,
			NotifyStartedFunc: func() { started <- nil }}
		go func() { started <- s.ListenAndServe() }()
		if err := <-started; err != nil {
			return nil, fmt.Errorf("upstream %s: %w", netw, err)
		}
		u.servers = append(u.servers, s)
	}
	return u, nil
}

func (u *upstream) stop() {
	for _, s := range u.servers {
		s.Shutdown()
	}
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	ip, ok := u.hits[name]
	if !ok && dns.IsSubDomain(missZone+".", name) {
		ip, ok = net.IPv4(10, 9, 9, 9), true
	}
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{u.soa}
	case q.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: upstreamTTL}, A: ip}}
	default:
		m.Ns = []dns.RR{u.soa}
	}
	w.WriteMsg(m)
}

// pinSelf puts every thread of this process (the Go runtime's, the upstream's) on cpu; threads created later
// inherit it from their creator.
func pinSelf(cpu string) error {
	n, err := strconv.Atoi(cpu)
	if err != nil {
		return err
	}
	var set unix.CPUSet
	set.Set(n)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pin thread %d to cpu %d: %w", tid, n, err)
		}
	}
	return nil
}
