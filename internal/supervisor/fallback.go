package supervisor

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// The link-local fallback (internal/nft/fallback.go): a table no instance owns, which sends the queries to the
// local IPs that nothing takes to the kube-dns ClusterIP, so that a crash, a pod delete or a rollout without
// surge is no DNS outage for clients of the link-local address. Leaving keeps it: it is exactly what must stay
// when no instance is left, for as long as its lease.
//
// Every instance says in its own table what it wants (set fallback4: the kube-dns ClusterIP and its DNS port,
// or nothing), and every instance derives the table from what all the live instances say (decideFallback), so
// two instances never fight over it: each one's write is the other's no-op, whatever their flags.

// fallbackTable is the fallback table in the kernel ([nft.FallbackTable]).
type fallbackTable interface {
	Apply(*nft.Fallback) error
	InSync(*nft.Fallback) (bool, error)
	Stamp() (nft.FallbackStamp, bool, error)
	Covers(*nft.Fallback) (bool, error)
	Lease() (time.Duration, bool, error)
	Stop() (bool, error)
	Delete() (bool, error)
}

var _ fallbackTable = nft.FallbackTable{}

// kubeDNSEnv is where kube-system pods find the kube-dns Service's ClusterIP (Kubernetes' service links).
const kubeDNSEnv = "KUBE_DNS_SERVICE_HOST"

// disagreement is $KUBE_DNS_SERVICE_HOST naming another kube-dns ClusterIP than the flags: the variable is
// only as current as the pod (it is not updated when kube-dns is recreated, and whoever later asks for the
// freed address through spec.clusterIP gets it), and anyone who may create a Service named kube-dns in the
// agent's own namespace sets it. So it never overrides the flags: taken is what the flags say (invalid when
// they name no one ClusterIP of the family, and the family gets no fallback).
type disagreement struct {
	env   netip.Addr
	taken netip.Addr
	from  string // "-kube-dns-ip" or "-localip"
}

// fallbackVote is what this instance says of the fallback: the kube-dns ClusterIPs (at most one per family)
// each with our DNS port, and where they came from; or none, and why; and every disagreement of the
// environment with the flags, which the caller logs. It is pure: the flags and the environment only.
// -kube-dns-ip, when given, names them all. Else each family takes $KUBE_DNS_SERVICE_HOST (the Service's
// primary family) when the flags cannot contradict it, else -localip's ClusterIP. Whatever names the target,
// it is never covered (decideFallback), so the variable must never name a target other than the ClusterIP
// -localip intercepts: the fallback would cover that ClusterIP and send it, and the link-local address, to
// whatever answers at the variable's address.
func fallbackVote(o *options.Options, getenv func(string) string) ([]netip.AddrPort, string, []disagreement) {
	if !o.LinkLocalFallback {
		return nil, "-linklocal-fallback=false", nil
	}
	var env netip.Addr
	if v := getenv(kubeDNSEnv); v != "" {
		var err error
		if env, err = netip.ParseAddr(v); err != nil || env.IsUnspecified() {
			return nil, fmt.Sprintf("$%s=%q is not an IP address", kubeDNSEnv, v), nil
		}
		env = env.Unmap()
	}
	var dis []disagreement
	ips, from := o.KubeDNSIPs, "-kube-dns-ip"
	if len(ips) > 0 {
		if i := slices.IndexFunc(ips, func(ip netip.Addr) bool { return env.IsValid() && ip.Is6() == env.Is6() }); i >= 0 && ips[i] != env {
			dis = append(dis, disagreement{env: env, taken: ips[i], from: from})
		}
	} else {
		var froms []string
		for _, v6 := range []bool{false, true} {
			// The standard manifest's -localip is "<link-local>,__PILLAR__DNS__SERVER__": its one address of
			// a family that is not link-local is the cluster DNS ClusterIP, whatever the Service is called
			// (rke2-coredns-..., coredns).
			local := clusterDNSOf(o.LocalIPs, v6)
			switch {
			case !env.IsValid() || env.Is6() != v6:
				if local.IsValid() {
					ips, froms = append(ips, local), append(froms, "-localip")
				}
			case envAgrees(env, o.LocalIPs):
				ips, froms = append(ips, env), append(froms, "$"+kubeDNSEnv)
			default:
				dis = append(dis, disagreement{env: env, taken: local, from: "-localip"})
				if local.IsValid() {
					ips, froms = append(ips, local), append(froms, "-localip")
				}
			}
		}
		from = strings.Join(slices.Compact(froms), " and ")
	}
	if len(ips) == 0 {
		if len(dis) > 0 {
			return nil, fmt.Sprintf("$%s=%v disagrees with -localip, which names no one ClusterIP of its family (give -kube-dns-ip)", kubeDNSEnv, env), dis
		}
		return nil, fmt.Sprintf("$%s is not set, -kube-dns-ip is not given, and -localip names no ClusterIP (the kube-dns Service's)", kubeDNSEnv), nil
	}
	if err := (nft.FallbackSpec{Targets: ips, Lease: o.FallbackLease}).Validate(); err != nil {
		return nil, fmt.Sprintf("%s %v: %v", from, ips, err), dis
	}
	vote := make([]netip.AddrPort, len(ips))
	for i, ip := range ips {
		vote[i] = netip.AddrPortFrom(ip, o.DNSPort)
	}
	slices.SortFunc(vote, netip.AddrPort.Compare)
	return vote, "kube-dns ClusterIP from " + from, dis
}

// envAgrees reports whether $KUBE_DNS_SERVICE_HOST's env cannot contradict -localip's addresses locals: it is
// one of them (the ClusterIP we intercept), or none of its family could be a ClusterIP (only link-local ones:
// IPVS mode's -localip). A ClusterIP is never link-local: such a variable names nothing to fall back to.
func envAgrees(env netip.Addr, locals []netip.Addr) bool {
	if env.IsLinkLocalUnicast() || env.IsLoopback() {
		return false
	}
	return slices.Contains(locals, env) || !slices.ContainsFunc(locals, func(ip netip.Addr) bool {
		return ip.Is6() == env.Is6() && !ip.IsLinkLocalUnicast() && !ip.IsLoopback()
	})
}

// logDisagreements says, once at start, where $KUBE_DNS_SERVICE_HOST was not taken, and what was instead.
func logDisagreements(log *zap.Logger, dis []disagreement) {
	for _, d := range dis {
		taken := "none: no link-local fallback for the family (give -kube-dns-ip)"
		if d.taken.IsValid() {
			taken = d.taken.String()
		}
		log.Warn("$"+kubeDNSEnv+" names another kube-dns ClusterIP than the flags: the link-local fallback takes the flags' "+
			"(the variable is stale after kube-dns is recreated, or set by a Service named kube-dns in this namespace)",
			zap.Stringer("env", d.env), zap.String("taken", taken), zap.String("from", d.from))
	}
}

// PrintFallback is what `-print-rules` shows for these flags and this environment: this instance's word in
// its table (spec.Fallbacks), and the fallback table it would keep were it alone (nil, and why, when none).
func PrintFallback(o *options.Options, getenv func(string) string) (vote []netip.AddrPort, table *nft.Fallback, why string) {
	vote, why, dis := fallbackVote(o, getenv)
	for _, d := range dis {
		why += fmt.Sprintf("; $%s=%v ignored: %s says %v", kubeDNSEnv, d.env, d.from, d.taken)
	}
	if !o.SetupNftables {
		return vote, nil, "-setupiptables=false"
	}
	d := decideFallback([]nft.Instance{{Table: "self", IPs: o.LocalIPs, Self: true, Voted: true, Fallbacks: vote}}, o.FallbackLease)
	if d.spec == nil {
		return vote, nil, why
	}
	return vote, nft.BuildFallback(*d.spec), d.why + ", " + why
}

// clusterDNSOf is the one address of ips of the family (IPv6 when v6) that is not link-local (nor loopback),
// or invalid when there is not exactly one.
func clusterDNSOf(ips []netip.Addr, v6 bool) netip.Addr {
	var found netip.Addr
	for _, ip := range ips {
		if ip.Is6() != v6 || ip.IsLinkLocalUnicast() || ip.IsLoopback() {
			continue
		}
		if found.IsValid() {
			return netip.Addr{}
		}
		found = ip
	}
	return found
}

// fallbackDecision is what the live instances' words add up to.
type fallbackDecision struct {
	// leave: no instance of this version has a say (only earlier versions', which keep a table of their own
	// making, or instances that intercept nothing): the table is left as it is.
	leave bool
	// spec is the table to keep; nil with leave false: delete it.
	spec *nft.FallbackSpec
	why  string // the decision, for the log
}

// decideFallback derives the fallback table from every live instance's word, the same on every instance:
// none while any instance wants none (a rollout of -linklocal-fallback=false sticks from its first pod on);
// else, for each family every instance names a kube-dns ClusterIP of, towards the lowest one said, covering
// every address of every instance (the union) on its own DNS port, except the ClusterIPs said, which fail
// open through kube-proxy. A family some instance names none of gets no fallback: so an earlier version's
// instance (IPv4 only) and this one decide the same table during a rollout, rather than rewriting each
// other's.
func decideFallback(ins []nft.Instance, lease time.Duration) fallbackDecision {
	var voters []nft.Instance
	for _, in := range ins {
		if in.Legacy {
			return fallbackDecision{leave: true, why: "an earlier version's instance keeps its own fallback table (" + in.Table + ")"}
		}
		if in.Voted {
			voters = append(voters, in)
		}
	}
	if len(voters) == 0 {
		return fallbackDecision{leave: true, why: "no instance intercepts"}
	}
	var said []netip.Addr
	for _, in := range voters {
		if len(in.Fallbacks) == 0 {
			return fallbackDecision{why: "instance table " + in.Table + " wants no fallback"}
		}
		for _, v := range in.Fallbacks {
			said = append(said, v.Addr())
		}
	}
	slices.SortFunc(said, netip.Addr.Compare)
	spec := &nft.FallbackSpec{Lease: lease}
	var why []string
	for _, v6 := range []bool{false, true} {
		ofFamily := func(v netip.AddrPort) bool { return v.Addr().Is6() == v6 }
		everyone := !slices.ContainsFunc(voters, func(in nft.Instance) bool { return !slices.ContainsFunc(in.Fallbacks, ofFamily) })
		if i := slices.IndexFunc(said, func(ip netip.Addr) bool { return ip.Is6() == v6 }); i >= 0 && everyone {
			spec.Targets = append(spec.Targets, said[i])
			why = append(why, said[i].String())
		}
	}
	if len(spec.Targets) == 0 {
		return fallbackDecision{why: "the instances name no ClusterIP of one family all alike"}
	}
	for _, in := range voters {
		for _, ip := range in.IPs {
			if !slices.Contains(said, ip) {
				spec.Covered = append(spec.Covered, netip.AddrPortFrom(ip, votedPort(in.Fallbacks, ip)))
			}
		}
	}
	slices.SortFunc(spec.Covered, netip.AddrPort.Compare)
	spec.Covered = slices.Compact(spec.Covered)
	return fallbackDecision{spec: spec, why: "towards " + strings.Join(why, " and ")}
}

// votedPort is the DNS port an instance's vote names for ip's family (its one port, whatever the family,
// when it names no ClusterIP of that family: nothing covers that address then).
func votedPort(vote []netip.AddrPort, ip netip.Addr) uint16 {
	for _, v := range vote {
		if v.Addr().Is4() == ip.Is4() {
			return v.Port()
		}
	}
	return vote[0].Port()
}

// fallback keeps the kernel's fallback table equal to the live instances' decision.
type fallback struct {
	log     *zap.Logger
	m       *metrics.Metrics
	table   fallbackTable // nil: the agent touches no kernel state
	vote    []netip.AddrPort
	lease   time.Duration
	said    string // the last decision logged
	skipped []netip.AddrPort
	newer   int // the generation of the newer version's table this instance stands back for (0: none), logged once
}

// newFallback prepares the fallback keeper for this instance's vote (fallbackVote); a vote of none says why,
// once.
func newFallback(log *zap.Logger, m *metrics.Metrics, table fallbackTable, o *options.Options, vote []netip.AddrPort, why string, dis []disagreement) *fallback {
	f := &fallback{log: log, m: m, table: table, vote: vote, lease: o.FallbackLease}
	logDisagreements(log, dis)
	if table != nil && o.SetupNftables && len(vote) == 0 {
		log.Warn("this instance wants no link-local fallback (while it is live, no instance keeps one): while nothing "+
			"listens, queries to the local IPs without a Service behind them fail", zap.String("reason", why))
	}
	m.FailOpen.WithLabelValues("link-local").Set(0)
	return f
}

// ensure makes the kernel's fallback table what the live instances ins (ours included) decide, writing it
// only when it differs or its lease is half gone. It reports what it changed ("" when nothing).
func (f *fallback) ensure(ins []nft.Instance) (string, error) {
	if f.table == nil {
		return "", nil
	}
	d := decideFallback(ins, f.lease)
	if d.why != f.said {
		f.said = d.why
		f.log.Info("link-local fallback decided", zap.String("decision", d.why), zap.Int("instances", len(ins)))
	}
	covered := false
	defer func() {
		f.m.FailOpen.WithLabelValues("link-local").Set(b2f(covered))
	}()
	switch {
	case d.leave:
		return "", nil
	case d.spec == nil:
		had, err := removeFallback(f.table, drainDelay)
		if err != nil {
			return "", fmt.Errorf("delete the link-local fallback: %w", err)
		}
		if !had {
			return "", nil
		}
		return "deleted the fallback table (" + d.why + ")", nil
	}
	want := nft.BuildFallback(*d.spec)
	if !slices.Equal(want.Skipped, f.skipped) {
		f.skipped = want.Skipped
		if len(want.Skipped) > 0 {
			f.log.Warn("no link-local fallback for these local IPs (not every live instance names a kube-dns ClusterIP of their family)",
				zap.Stringers("pairs", want.Skipped), zap.Stringers("kube-dns", d.spec.Targets))
		}
	}
	ok, err := f.table.InSync(want)
	back := false
	if err == nil && !ok {
		back, err = f.standBack(want)
	}
	switch {
	case err != nil:
	case back:
		err = f.renewAt(want, f.lease/4)
	case !ok:
		f.newer = 0
		err = f.table.Apply(want)
	default:
		err = f.renewAt(want, f.lease/2)
	}
	if err != nil {
		return "", fmt.Errorf("link-local fallback: %w", err)
	}
	covered = len(f.vote) > 0 && len(want.Skipped) == 0
	if ok || back {
		return "", nil
	}
	return fmt.Sprintf("fallback table for %v towards %v (lease %v)", want.Covered(), d.spec.Targets, f.lease), nil
}

// standBack reports whether the kernel's table, out of sync with want, is a later version's writing of the same
// decision (its stamp's generation is higher, its targets and covered pairs are want's): that version's rules
// stand, and this instance does not write them back to its own (fallback_stamp.go in internal/nft).
func (f *fallback) standBack(want *nft.Fallback) (bool, error) {
	stamp, found, err := f.table.Stamp()
	if err != nil || !found || !stamp.Newer() || !stamp.SameDecision(want) {
		return false, err
	}
	same, err := f.table.Covers(want)
	if err != nil || !same {
		return false, err
	}
	if f.newer != stamp.Generation {
		f.newer = stamp.Generation
		f.log.Info("a later version's link-local fallback table is in place, for the same decision: left to it",
			zap.Stringer("stamp", stamp), zap.Stringer("ours", want.Stamp))
	}
	return true, nil
}

// renewAt writes the table again (ours: want) once less than threshold is left of the lease on some pair:
// every pair then starts a new lease. In sync, at half of this instance's lease. Instances of other
// -fallback-lease values do not fight over it (the content does not name the lease): the one with the longer
// lease renews more often, the other finds enough left. Standing back for a later version's table, at a
// quarter: while that version runs it renews at half, first; once it is gone (a rollback), this one takes the
// table back before the lease runs out. A renewal is no repair; it is logged at debug level only.
func (f *fallback) renewAt(want *nft.Fallback, threshold time.Duration) error {
	left, any, err := f.table.Lease()
	if err != nil || !any || left >= threshold {
		return err
	}
	if err := f.table.Apply(want); err != nil {
		return err
	}
	f.log.Debug("renewed the link-local fallback's lease", zap.Duration("left", left), zap.Duration("lease", f.lease))
	return nil
}

// removeFallback takes the fallback table away without losing the queries it redirected last: first no new
// query is redirected, then those in flight get drain to be answered (IPVS's replies still need their address
// back), then the table goes. It reports whether there was one.
func removeFallback(t fallbackTable, drain time.Duration) (bool, error) {
	had, err := t.Stop()
	if err != nil || !had {
		return had, err
	}
	time.Sleep(drain)
	return t.Delete()
}
