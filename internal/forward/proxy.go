package forward

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin/pkg/proxy"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelocaldns/nodelocaldns/internal/upstream"
)

// proxyName is the proxy_name label of the coredns_proxy_* series, as CoreDNS's forward sets it.
const proxyName = "forward"

// upstreamProxy is one upstream of a forward. CoreDNS's proxy.Proxy keeps what CoreDNS does around the
// transport (the health checks, their failure count and series, Down); queries to a plain DNS upstream go over
// our transport (own), and those to tls://, https:// or quic:// upstreams, or from a source_address, over
// CoreDNS's (own is nil).
type upstreamProxy struct {
	cp   *proxy.Proxy
	addr string
	m    *Metrics // its Forward's
	// addrFunc is Addr as a func value, made once: the metadata forward/upstream is set to it on every query,
	// and a method value made there was an allocation per miss.
	addrFunc func() string
	own      *upstream.Upstream
	// native says own carries the queries once started.
	native bool
	// clientSubnet says queries to it carry the client's address (CarryClientSubnet, clientsubnet.go).
	clientSubnet atomic.Bool
	// durations caches coredns_proxy_request_duration_seconds' series for this upstream by rcode, each created
	// on its first answer as CoreDNS's are: the label lookup (three labels hashed, a lock) was paid on every
	// miss.
	durations [16]atomic.Pointer[prometheus.Observer]
}

func newUpstreamProxy(cp *proxy.Proxy, addr string, native bool) *upstreamProxy {
	p := &upstreamProxy{cp: cp, addr: addr, native: native}
	p.addrFunc = p.Addr
	return p
}

// duration is the request duration series of rcode for this upstream.
func (p *upstreamProxy) duration(rcode int) prometheus.Observer {
	if rcode >= 0 && rcode < len(p.durations) {
		if o := p.durations[rcode].Load(); o != nil {
			return *o
		}
	}
	rc, ok := dns.RcodeToString[rcode]
	if !ok {
		rc = strconv.Itoa(rcode)
	}
	o := p.m.requestDuration.WithLabelValues(proxyName, p.addr, rc)
	if rcode >= 0 && rcode < len(p.durations) {
		p.durations[rcode].Store(&o)
	}
	return o
}

// Addr is the upstream's address, as the `to` label spells it.
func (p *upstreamProxy) Addr() string { return p.addr }

// Down says the health checks have failed more than maxfails times in a row.
func (p *upstreamProxy) Down(maxfails uint32) bool { return p.cp.Down(maxfails) }

// Healthcheck starts checking the upstream (CoreDNS's probe: one check per interval until one succeeds).
func (p *upstreamProxy) Healthcheck() { p.cp.Healthcheck() }

func (p *upstreamProxy) start(hcInterval time.Duration, opts upstream.Options) {
	p.cp.Start(hcInterval)
	if p.native {
		opts.Observer = newConnSeries(p.m, p.addr)
		p.own = upstream.New(p.addr, opts)
	}
}

// connSeries counts our transport into CoreDNS's coredns_proxy_conn_cache_* series: a query sent on an open
// connection is a hit, a connection opened a miss (CoreDNS counts a miss per dial too).
type connSeries struct {
	hitTCP, hitUDP, missTCP, missUDP prometheus.Counter
}

func newConnSeries(m *Metrics, addr string) *connSeries {
	return &connSeries{
		hitTCP:  m.connCacheHits.WithLabelValues(proxyName, addr, "tcp"),
		hitUDP:  m.connCacheHits.WithLabelValues(proxyName, addr, "udp"),
		missTCP: m.connCacheMisses.WithLabelValues(proxyName, addr, "tcp"),
		missUDP: m.connCacheMisses.WithLabelValues(proxyName, addr, "udp"),
	}
}

func (s *connSeries) Queried(proto string) {
	if proto == "tcp" {
		s.hitTCP.Inc()
	} else {
		s.hitUDP.Inc()
	}
}

func (s *connSeries) Dialed(proto string) {
	if proto == "tcp" {
		s.missTCP.Inc()
	} else {
		s.missUDP.Inc()
	}
}

func (p *upstreamProxy) stop() {
	p.cp.Stop()
	if p.own != nil {
		p.own.Stop()
	}
}

// errStopped says a query reached a forward whose instance was already shut down.
var errStopped = errors.New("forward: upstream transport not started")

// connect asks the upstream, over the protocol CoreDNS's forward would use: TCP with force_tcp, UDP with
// prefer_udp, else the client's. The answer carries the request's ID.
func (p *upstreamProxy) connect(ctx context.Context, state request.Request, opts proxy.Options, readTimeout time.Duration, deadline time.Time) (*dns.Msg, error) {
	if !p.native {
		ret, _, _, err := p.cp.Connect(ctx, state, opts)
		return ret, err
	}
	if p.own == nil {
		return nil, errStopped
	}
	tcp := opts.ForceTCP || (!opts.PreferUDP && state.Proto() == "tcp")
	start := time.Now()
	d := start.Add(readTimeout)
	if d.After(deadline) {
		d = deadline
	}
	ret, err := p.own.Exchange(ctx, state.Req, tcp, d)
	if err != nil {
		if errors.Is(err, upstream.ErrInvalidRequest) {
			return nil, errors.Join(proxy.ErrInvalidRequest, err)
		}
		return nil, err
	}
	p.duration(ret.Rcode).Observe(time.Since(start).Seconds())
	return ret, nil
}
