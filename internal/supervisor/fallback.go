package supervisor

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// The link-local fallback (internal/nft/fallback.go): a table no instance owns, which sends queries to the
// local IPs to kube-dns-upstream while no instance takes them, so that a crash, a pod delete or a drain is no
// DNS outage for clients of the link-local address. Every instance keeps it in place for the union of the live
// instances' addresses: they all build the same table from the same union, so two instances never fight over
// it (each one's write is the other's no-op). Leaving keeps it: it is exactly what must stay when no instance
// is left. Only `-teardown` with no instance alive, or an instance started with -linklocal-fallback=false,
// removes it.

// fallbackTable is the fallback table in the kernel ([*nft.Conn]).
type fallbackTable interface {
	ApplyFallback(*nft.Fallback) error
	FallbackInSync(*nft.Fallback) (bool, error)
	StopFallback() (bool, error)
	DeleteFallback() (bool, error)
}

var _ fallbackTable = (*nft.Conn)(nil)

// fallback decides the fallback table's content and keeps the kernel's equal to it.
type fallback struct {
	log      *zap.Logger
	m        *metrics.Metrics
	table    fallbackTable
	upstream netip.Addr // kube-dns-upstream's ClusterIP; invalid: no fallback (disabled says why)
	port     uint16
	disabled string // why there is no fallback, "" when there is one
	remove   bool   // disabled by the operator: a table an earlier run left goes too
	skipped  []netip.Addr
}

// newFallback prepares the fallback towards upstream (the value of the upstream Service's host variable).
// -linklocal-fallback=false disables it and removes the table; -setupiptables=false disables it quietly.
// Without a usable upstream it is disabled, and says why once.
func newFallback(log *zap.Logger, m *metrics.Metrics, table fallbackTable, o *options.Options, upstreamEnv, upstream string) *fallback {
	f := &fallback{log: log, m: m, table: table, port: o.DNSPort}
	ip, err := netip.ParseAddr(upstream)
	spec := nft.FallbackSpec{Upstream: ip.Unmap(), DNSPort: o.DNSPort}
	switch {
	case table == nil:
		f.disabled = "the agent touches no kernel state"
		return f
	case !o.SetupNftables:
		// Nothing of ours intercepts, so there is nothing to fall back from; a table another instance keeps
		// is its business.
		f.disabled = "-setupiptables=false"
		return f
	case !o.LinkLocalFallback:
		f.disabled, f.remove = "-linklocal-fallback=false", true
	case upstream == "":
		f.disabled = fmt.Sprintf("$%s is not set (the -upstreamsvc Service's ClusterIP)", upstreamEnv)
	case err != nil:
		f.disabled = fmt.Sprintf("$%s=%q is not an IP address", upstreamEnv, upstream)
	default:
		if err := spec.Validate(); err != nil {
			f.disabled = err.Error()
		} else {
			f.upstream = spec.Upstream
		}
	}
	if f.disabled != "" {
		log.Warn("no link-local fallback: while no instance listens, queries to the local IPs without a Service behind them fail",
			zap.String("reason", f.disabled))
	}
	withMetrics(m, func(m *metrics.Metrics) { m.FailOpen.WithLabelValues("link-local").Set(0) })
	return f
}

// ensure makes the kernel's fallback table cover ips (the union of the live instances' addresses), writing
// it only when it differs. It reports what it changed ("" when nothing). Disabled because the operator said so,
// it removes a table an earlier run left instead.
func (f *fallback) ensure(ips []netip.Addr) (string, error) {
	if f.disabled != "" {
		if !f.remove {
			return "", nil
		}
		had, err := removeFallback(f.table, drainDelay)
		if err != nil {
			return "", fmt.Errorf("delete the link-local fallback: %w", err)
		}
		f.remove = false // once: nothing of ours re-creates it
		if !had {
			return "", nil
		}
		return "deleted the fallback table (-linklocal-fallback=false)", nil
	}
	want := nft.BuildFallback(nft.FallbackSpec{LocalIPs: ips, Upstream: f.upstream, DNSPort: f.port})
	if !slices.Equal(want.Skipped, f.skipped) {
		f.skipped = want.Skipped
		if len(want.Skipped) > 0 {
			f.log.Warn("no link-local fallback for these local IPs (another family than the upstream's, or too many)",
				zap.Stringers("ips", want.Skipped), zap.Stringer("upstream", f.upstream))
		}
	}
	ok, err := f.table.FallbackInSync(want)
	if err == nil && !ok {
		err = f.table.ApplyFallback(want)
	}
	covered := err == nil && len(want.Skipped) == 0
	withMetrics(f.m, func(m *metrics.Metrics) { m.FailOpen.WithLabelValues("link-local").Set(b2f(covered)) })
	if err != nil {
		return "", fmt.Errorf("link-local fallback: %w", err)
	}
	if ok {
		return "", nil
	}
	return fmt.Sprintf("fallback table for %v via %s", want.Covered, f.upstream), nil
}

// removeFallback takes the fallback table away without losing the queries it redirected last: first no new
// query is redirected, then those in flight get drain to be answered (their replies still need their address
// back), then the table goes. It reports whether there was one.
func removeFallback(t fallbackTable, drain time.Duration) (bool, error) {
	had, err := t.StopFallback()
	if err != nil || !had {
		return had, err
	}
	time.Sleep(drain)
	return t.DeleteFallback()
}
