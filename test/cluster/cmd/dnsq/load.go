package main

import (
	"encoding/json"
	"flag"
	"fmt"
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
	Bad     int    `json:"bad"`     // an answer, but not the right one (NOERROR with an address; with -unique, NXDOMAIN)
	FirstMs int64  `json:"firstMs"` // first failure, milliseconds after the start (-1: none)
	LastMs  int64  `json:"lastMs"`  // last failure
	// FailMs are the failures' send times, milliseconds after the start, in no order: the first maxFailTimes.
	FailMs []int64 `json:"failMs,omitempty"`
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
	if err := fs.Parse(args); err != nil || *servers == "" || *name == "" || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "usage: dnsq load -server S[,S2] -name N [-rate R] [-duration D] [-timeout T] [-proto udp,tcp] [-unique]")
		return 2
	}
	// Unique across loads and runs: a name asked before (by an earlier run against the same cluster) could be a
	// hit in a cache.
	nonce := time.Now().UnixNano()
	var wg sync.WaitGroup
	results := make([]*loadResult, 0)
	for _, s := range strings.Split(*servers, ",") {
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
			r := &loadResult{Server: addr, Proto: proto, FirstMs: -1, LastMs: -1, Answers: map[string]int{}}
			q := fixedName(dns.Fqdn(*name))
			if *unique {
				q = uniqueNames(fmt.Sprintf("u%x-%d", nonce, len(results)), dns.Fqdn(*name))
			}
			results = append(results, r)
			wg.Add(1)
			go func() {
				defer wg.Done()
				runLoad(r, q, *rate, *duration, *timeout)
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

// maxFailTimes bounds the failure times a result lists: enough to tell losses at a few instants from losses
// spread over time.
const maxFailTimes = 64

func runLoad(r *loadResult, q question, rate int, duration, timeout time.Duration) {
	c := &dns.Client{Timeout: timeout, Net: r.Proto}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for now := range tick.C {
		if now.Sub(start) >= duration {
			break
		}
		name, rcode := q(r.Sent)
		r.Sent++
		wg.Add(1)
		go func(at time.Duration) {
			defer wg.Done()
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			resp, _, err := c.Exchange(m, r.Server)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
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
			case resp.Rcode != rcode || (rcode == dns.RcodeSuccess && len(resp.Answer) == 0):
				r.Bad++
			default:
				r.OK++
				for _, rr := range resp.Answer {
					if a, ok := rr.(*dns.A); ok {
						r.Answers[a.A.String()]++
						break
					}
				}
			}
		}(now.Sub(start))
	}
	wg.Wait()
}
