package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// loadResult is what `dnsq load` prints for one server and protocol, as one JSON line.
type loadResult struct {
	Server  string `json:"server"`
	Proto   string `json:"proto"` // udp or tcp
	Sent    int    `json:"sent"`
	OK      int    `json:"ok"`
	Failed  int    `json:"failed"`  // no answer within the timeout, or a socket error
	Bad     int    `json:"bad"`     // an answer, but not NOERROR with an address
	FirstMs int64  `json:"firstMs"` // first failure, milliseconds after the start (-1: none)
	LastMs  int64  `json:"lastMs"`  // last failure
	// FailMs are the failures' send times, milliseconds after the start, in no order: the first maxFailTimes.
	FailMs []int64 `json:"failMs,omitempty"`
	// StartMs is when the load began, in milliseconds since the Unix epoch: the pods share the node's clock
	// with whatever runs the load, which can then place the failures' times against its own events.
	StartMs int64 `json:"startMs"`
	// Rate is the queries per second the load sent at.
	Rate int `json:"rate"`
	// LagMs is, by the second a query was sent in (the index: seconds after the start), the longest an answered
	// query took, in milliseconds: how long queries were in flight then, the control a loss is judged against.
	LagMs []int64 `json:"lagMs,omitempty"`
	// Answers counts the good answers by the first A record's address: which upstream resolved a name shows in
	// it when each upstream answers another address.
	Answers map[string]int `json:"answers"`
}

// load sends queries at a steady rate to each server over each protocol, each from a fresh socket (a new source
// port, as a stub resolver would), and counts what is lost. The rate is kept by a ticker, not by waiting for answers, so a
// stalled server shows as failures rather than as a slower load.
func load(args []string) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	servers := fs.String("server", "", "comma-separated server addresses")
	name := fs.String("name", "", "name to ask for (A)")
	rate := fs.Int("rate", 100, "queries per second per server")
	duration := fs.Duration("duration", 10*time.Second, "how long to send")
	timeout := fs.Duration("timeout", time.Second, "how long to wait for each answer")
	protos := fs.String("proto", "udp", "comma-separated protocols, each a load of its own: udp, tcp")
	unique := fs.Bool("unique", false, "each query asks a name of its own below -name, which must not exist: "+
		"a miss for every cache on the way, whose right answer is NXDOMAIN")
	resolver := fs.Bool("resolver", false, "each query is a lookup through /etc/resolv.conf (search list, ndots) by Go's resolver, "+
		"as an application makes it; -rate is then of lookups, and -server and -proto are not used")
	if err := fs.Parse(args); err != nil || (*servers == "" && !*resolver) || *name == "" || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "usage: dnsq load -server S[,S2] -name N [-rate R] [-duration D] [-timeout T] [-proto udp,tcp] [-unique]\n"+
			"       dnsq load -resolver -name N [-rate R] [-duration D] [-timeout T]")
		return 2
	}
	// Unique across loads and runs: a name asked before (by an earlier run against the same cluster) could be a
	// hit in a cache.
	nonce := time.Now().UnixNano()
	var wg sync.WaitGroup
	results := make([]*loadResult, 0)
	list := strings.Split(*servers, ",")
	if *resolver {
		r := &loadResult{Server: "resolv.conf", Proto: "udp", FirstMs: -1, LastMs: -1, Rate: *rate, Answers: map[string]int{}}
		results = append(results, r)
		runLoad(r, lookupAsker(*name, *timeout), *rate, *duration)
		list = nil
	}
	for _, s := range list {
		addr, err := serverAddr(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, proto := range strings.Split(*protos, ",") {
			if proto != "udp" && proto != "tcp" {
				fmt.Fprintf(os.Stderr, "unknown protocol %q\n", proto)
				return 2
			}
			r := &loadResult{Server: addr, Proto: proto, FirstMs: -1, LastMs: -1, Rate: *rate, Answers: map[string]int{}}
			q := fixedName(dns.Fqdn(*name))
			if *unique {
				q = uniqueNames(fmt.Sprintf("u%x-%d", nonce, len(results)), dns.Fqdn(*name))
			}
			results = append(results, r)
			wg.Add(1)
			go func() {
				defer wg.Done()
				runLoad(r, exchangeAsker(r, q, *timeout), *rate, *duration)
			}()
		}
	}
	wg.Wait()
	enc := json.NewEncoder(os.Stdout)
	for _, r := range results {
		enc.Encode(r)
	}
	return 0
}

// A question is what the load's i-th query asks, and the rcode of a right answer.
type question func(i int) (name string, rcode int)

// fixedName asks one name every time: a right answer is NOERROR with an address.
func fixedName(name string) question {
	return func(int) (string, int) { return name, dns.RcodeSuccess }
}

// uniqueNames asks prefix-i.zone for the i-th query: names that do not exist, so a right answer is NXDOMAIN.
func uniqueNames(prefix, zone string) question {
	return func(i int) (string, int) { return fmt.Sprintf("%s-%d.%s", prefix, i, zone), dns.RcodeNameError }
}

// maxFailTimes bounds the failure times a result lists: every failure of the lifecycle cases' loads (a minute at
// 100 queries a second is 6,000), so that losses after an event can be told from those before it.
const maxFailTimes = 10000

// outcome is how one query of a load went.
type outcome int

const (
	answered outcome = iota // the right answer (first is its address, if it has one)
	failed                  // no answer within the timeout, or a socket error
	bad                     // an answer, but not the right one
)

// asker makes the i-th query of a load.
type asker func(i int) (o outcome, first string)

// exchangeAsker asks the server directly, from a fresh socket.
func exchangeAsker(r *loadResult, q question, timeout time.Duration) asker {
	c := &dns.Client{Timeout: timeout, Net: r.Proto}
	return func(i int) (outcome, string) {
		name, rcode := q(i)
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		resp, _, err := c.Exchange(m, r.Server)
		switch {
		case err != nil:
			return failed, ""
		case resp.Rcode != rcode || (rcode == dns.RcodeSuccess && len(resp.Answer) == 0):
			return bad, ""
		}
		for _, rr := range resp.Answer {
			if a, ok := rr.(*dns.A); ok {
				return answered, a.A.String()
			}
		}
		return answered, ""
	}
}

// lookupAsker looks the name up as an application does: Go's resolver reads /etc/resolv.conf, so a name with
// fewer dots than its ndots is asked with each search domain first, one query after the other until one is
// answered. A name no expansion resolves is bad (the last answer was NXDOMAIN), like one that resolves to
// nothing.
func lookupAsker(name string, timeout time.Duration) asker {
	r := &net.Resolver{PreferGo: true}
	return func(int) (outcome, string) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		addrs, err := r.LookupNetIP(ctx, "ip4", name)
		var dnsErr *net.DNSError
		switch {
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			return bad, ""
		case err != nil:
			return failed, ""
		case len(addrs) == 0:
			return bad, ""
		}
		return answered, addrs[0].Unmap().String()
	}
}

func runLoad(r *loadResult, ask asker, rate int, duration time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	r.StartMs = start.UnixMilli()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for now := range tick.C {
		if now.Sub(start) >= duration {
			break
		}
		i := r.Sent
		r.Sent++
		wg.Add(1)
		go func(at time.Duration) {
			defer wg.Done()
			o, first := ask(i)
			took := time.Since(start) - at
			mu.Lock()
			defer mu.Unlock()
			if o != failed {
				sec := int(at / time.Second)
				for len(r.LagMs) <= sec {
					r.LagMs = append(r.LagMs, 0)
				}
				r.LagMs[sec] = max(r.LagMs[sec], took.Milliseconds())
			}
			switch o {
			case failed:
				r.Failed++
				ms := at.Milliseconds()
				if r.FirstMs < 0 || ms < r.FirstMs {
					r.FirstMs = ms
				}
				if ms > r.LastMs {
					r.LastMs = ms
				}
				if len(r.FailMs) < maxFailTimes {
					r.FailMs = append(r.FailMs, ms)
				}
			case bad:
				r.Bad++
			default:
				r.OK++
				if first != "" {
					r.Answers[first]++
				}
			}
		}(now.Sub(start))
	}
	wg.Wait()
}
