package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// query sends one question and prints "rcode=NAME" then each answer record, one per line, as miekg/dns formats
// them (the zone-file form dig prints). Three tries, two seconds each: the result is about what answers, not
// about how fast. -sport P sends the tries from source ports P, P+1 and P+2, so a test can find the flows of
// this query (and only those) in the conntrack table.
func query(args []string) int {
	fs := flag.NewFlagSet("q", flag.ContinueOnError)
	tcp := fs.Bool("tcp", false, "query over TCP")
	qtype := fs.String("type", "A", "question type (A, AAAA, SRV, PTR, CNAME, TXT)")
	server := fs.String("server", "", "server address (default: the first nameserver of /etc/resolv.conf)")
	sport := fs.Int("sport", 0, "source port of the first try (the next tries use the next ports); 0: any")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || *sport < 0 || *sport > 65533 {
		fmt.Fprintln(os.Stderr, "usage: dnsq q [-tcp] [-type T] [-server ADDR] [-sport PORT] NAME")
		return 2
	}
	addr, err := serverAddr(*server)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	t, ok := dns.StringToType[strings.ToUpper(*qtype)]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown type %q\n", *qtype)
		return 2
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(fs.Arg(0)), t)
	c := &dns.Client{Timeout: 2 * time.Second}
	if *tcp {
		c.Net = "tcp"
	}
	var r *dns.Msg
	for try := 0; try < 3; try++ {
		if *sport != 0 {
			c.Dialer = &net.Dialer{Timeout: c.Timeout, LocalAddr: localAddr(c.Net, *sport+try)}
		}
		if r, _, err = c.Exchange(m, addr); err == nil {
			break
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "no answer from %s: %v\n", addr, err)
		return 1
	}
	fmt.Printf("rcode=%s\n", dns.RcodeToString[r.Rcode])
	for _, rr := range r.Answer {
		fmt.Println(rr.String())
	}
	return 0
}

// localAddr is the wildcard address with port p, for a dialer of network n ("" is UDP, as in miekg/dns).
func localAddr(n string, p int) net.Addr {
	if n == "tcp" {
		return &net.TCPAddr{Port: p}
	}
	return &net.UDPAddr{Port: p}
}

// serverAddr returns host:53 for a bare address and the resolv.conf nameserver when none is given.
func serverAddr(s string) (string, error) {
	if s == "" {
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return "", err
		}
		if len(cc.Servers) == 0 {
			return "", fmt.Errorf("no nameserver in /etc/resolv.conf")
		}
		s = cc.Servers[0]
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		s = net.JoinHostPort(s, "53")
	}
	return s, nil
}

// lookup resolves a name with Go's own resolver, which reads /etc/resolv.conf (search list, ndots) as libc does.
func lookup(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: dnsq lookup NAME")
		return 2
	}
	r := &net.Resolver{PreferGo: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(strings.Join(addrs, " "))
	return 0
}
