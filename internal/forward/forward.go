package forward

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/plugin/pkg/proxy"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"

	"github.com/nodelocaldns/nodelocaldns/internal/chain"
	"github.com/nodelocaldns/nodelocaldns/internal/upstream"
)

// Name is the directive's name: ours replaces CoreDNS's under the same one.
const Name = "forward"

// Env chooses the transport under the forward directive: this forward by default (PipelinedName, "pipelined",
// or unset), CoreDNS's with CoreDNS ("coredns"), the way back.
const (
	Env           = "NODELOCALDNS_FORWARD"
	PipelinedName = "pipelined"
	CoreDNS       = "coredns"
)

// Pipelined says whether the forward directive runs this forward: unless the environment asks for CoreDNS's.
func Pipelined(getenv func(string) string) bool { return getenv(Env) != CoreDNS }

// CoreDNS's forward's constants, with their meaning (plugin/forward/forward.go).
const (
	defaultExpire      = 10 * time.Second
	defaultReadTimeout = 2 * time.Second
	hcInterval         = 500 * time.Millisecond
	// defaultTimeout is a query's whole budget, over every upstream and attempt; then SERVFAIL.
	defaultTimeout = 5 * time.Second
	// defaultConnectAttemptsPerUpstream times the number of upstreams bounds a query's attempts.
	defaultConnectAttemptsPerUpstream = 2
	maxUpstreams                      = 15
)

// Errors with CoreDNS's texts.
var (
	// ErrNoHealthy means every upstream is down and failfast_all_unhealthy_upstreams is set.
	ErrNoHealthy = errors.New("no healthy proxies")
)

// Forward is one `forward` stanza: what CoreDNS's forward plugin is, over our transport.
type Forward struct {
	concurrent atomic.Int64
	m          *Metrics // set by setup, with each proxy's

	proxies   []*upstreamProxy
	toEntries int // the TO arguments that named an upstream
	p         policy

	from    string
	ignored []string

	nextAlternateRcodes []int
	nextOnNodata        bool
	failoverRcodes      []int

	maxfails                   uint32
	expire                     time.Duration
	maxAge                     time.Duration
	readTimeout                time.Duration
	hcInterval                 time.Duration
	maxConcurrent              int64
	failfastUnhealthyUpstreams bool
	maxConnectAttempts         uint32
	maxConnectAttemptsSet      bool

	opts proxy.Options

	// errLimitExceeded is returned with REFUSED when max_concurrent is reached (CoreDNS's text).
	errLimitExceeded error

	Next plugin.Handler
}

func newForward() *Forward {
	return &Forward{
		maxfails: 2, expire: defaultExpire, readTimeout: defaultReadTimeout, hcInterval: hcInterval,
		p: random{}, from: ".",
		opts: proxy.Options{HCRecursionDesired: true, HCDomain: "."},
	}
}

// Name implements plugin.Handler.
func (f *Forward) Name() string { return Name }

// Len is the number of upstreams.
func (f *Forward) Len() int { return len(f.proxies) }

// ForceTCP says queries go over TCP whatever the client used.
func (f *Forward) ForceTCP() bool { return f.opts.ForceTCP }

// PreferUDP says queries go over UDP whatever the client used (unless force_tcp).
func (f *Forward) PreferUDP() bool { return f.opts.PreferUDP }

// transportOptions are our transport's settings for this stanza: its connections expire when unused as
// CoreDNS's do, and none lives longer than max_age.
func (f *Forward) transportOptions() upstream.Options {
	o := upstream.Options{Expire: f.expire}
	if f.maxAge > 0 {
		o.MaxAge = f.maxAge * 2 / 3 // jittered up to 3/2 of it
	}
	return o
}

// OnStartup starts every upstream's health checks and transport.
func (f *Forward) OnStartup() error {
	for _, p := range f.proxies {
		p.start(f.hcInterval, f.transportOptions())
	}
	return nil
}

// OnShutdown stops them; queries in flight on our transport are still answered.
func (f *Forward) OnShutdown() error {
	for _, p := range f.proxies {
		p.stop()
	}
	return nil
}

// ServeDNS implements plugin.Handler with CoreDNS's forward's semantics: upstreams in the policy's order,
// skipping those the health checks marked down, at most max_connect_attempts sends, within 5 s; SERVFAIL when
// none answered. What differs is below it: the transport (internal/upstream) hedges and retries within an
// upstream before this loop sees an error.
func (f *Forward) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	if !f.match(state) {
		return plugin.NextOrFailure(f.Name(), f.Next, ctx, w, r)
	}
	if f.maxConcurrent > 0 {
		n := f.concurrent.Add(1)
		defer f.concurrent.Add(-1)
		if n > f.maxConcurrent {
			f.m.maxConcurrent.Inc()
			return dns.RcodeRefused, f.errLimitExceeded
		}
	}

	list := f.p.list(f.proxies)
	deadline := time.Now().Add(defaultTimeout)
	maxAttempts := uint64(f.maxConnectAttempts)
	if !f.maxConnectAttemptsSet {
		maxAttempts = defaultConnectAttemptsPerUpstream * uint64(len(list))
	}
	var (
		upstreamErr      error
		attempts         uint64
		fails, failovers int
		withSubnet       *dns.Msg // the query with the client's address, made on the first upstream that carries it
	)
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil && (maxAttempts == 0 || attempts < maxAttempts); {
		if i >= len(list) {
			i, fails = 0, 0
		}
		p := list[i]
		i++
		if p.Down(f.maxfails) {
			fails++
			if fails < len(f.proxies) {
				continue
			}
			f.m.healthcheckBroken.Inc()
			if f.failfastUnhealthyUpstreams {
				break
			}
			// Every upstream is down: the health checks are likely what is broken; try one at random.
			p = random{}.list(f.proxies)[0]
		}
		metadata.SetValueFunc(ctx, "forward/upstream", p.addrFunc)

		ret, err := f.ask(ctx, p, state, &withSubnet, deadline)
		upstreamErr = err
		if err != nil {
			if errors.Is(err, proxy.ErrInvalidRequest) {
				return dns.RcodeFormatError, err
			}
			if f.maxfails != 0 {
				p.Healthcheck()
			}
			if maxAttempts > 0 {
				if attempts++; attempts >= maxAttempts {
					break
				}
			}
			if fails < len(f.proxies) {
				continue
			}
			break
		}
		if !state.Match(ret) {
			formerr := new(dns.Msg)
			formerr.SetRcode(state.Req, dns.RcodeFormatError)
			_ = w.WriteMsg(formerr)
			return 0, nil
		}
		if slices.Contains(f.failoverRcodes, ret.Rcode) {
			if failovers++; failovers < len(f.proxies) {
				continue
			}
		}
		if f.Next != nil {
			if _, ok := f.Next.(*Forward); ok {
				if slices.Contains(f.nextAlternateRcodes, ret.Rcode) ||
					(f.nextOnNodata && ret.Rcode == dns.RcodeSuccess && len(ret.Answer) == 0) {
					return plugin.NextOrFailure(f.Name(), f.Next, ctx, w, r)
				}
			}
		}
		_ = chain.WriteOwned(w, ret) // ret is this query's alone: the cache may change it instead of copying it
		return 0, nil
	}
	if upstreamErr != nil {
		return dns.RcodeServerFailure, upstreamErr
	}
	return dns.RcodeServerFailure, ErrNoHealthy
}

// ask sends the query to p, as many times as CoreDNS's forward would: again when its transport found a cached
// connection closed, and over TCP after a truncated answer with prefer_udp. An upstream that carries the client's
// address (clientsubnet.go) gets *withSubnet, made on first use, and its answer loses what that added.
func (f *Forward) ask(ctx context.Context, p *upstreamProxy, state request.Request, withSubnet **dns.Msg, deadline time.Time) (*dns.Msg, error) {
	sent := state
	if p.clientSubnet.Load() {
		if *withSubnet == nil {
			*withSubnet = withClientSubnet(state.Req, state.W.RemoteAddr())
		}
		sent.Req = *withSubnet
	}
	opts := f.opts
	for {
		ret, err := p.connect(ctx, sent, opts, f.readTimeout, deadline)
		if errors.Is(err, proxy.ErrCachedClosed) {
			continue // CoreDNS's transport: the peer closed a cached connection before the query went out
		}
		if ret != nil && ret.Truncated && !opts.ForceTCP && opts.PreferUDP {
			opts.ForceTCP = true // prefer_udp: a truncated answer is asked again over TCP
			continue
		}
		if ret != nil && sent.Req != state.Req {
			withoutClientSubnet(ret, state.Req)
		}
		return ret, err
	}
}

func (f *Forward) match(state request.Request) bool {
	if f.from == "." && len(f.ignored) == 0 {
		return true // every name is under the root; this spares a miss the name's lowering and splitting
	}
	name := state.Name()
	if !plugin.Name(f.from).Matches(name) {
		return false
	}
	if dns.Name(name) == dns.Name(f.from) {
		return true
	}
	for _, ignore := range f.ignored {
		if plugin.Name(ignore).Matches(name) {
			return false
		}
	}
	return true
}
