package desired

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// KubeDNSEnv is where kube-system pods find the kube-dns Service's ClusterIP (Kubernetes' service links).
const KubeDNSEnv = "KUBE_DNS_SERVICE_HOST"

// Fallback is why this instance's vote on the link-local fallback (State.NFT.Fallbacks) is what it is.
type Fallback struct {
	// Why says where the vote's ClusterIPs came from, or, with no vote, why the instance wants no fallback.
	Why string
	// Ignored is every place $KUBE_DNS_SERVICE_HOST disagreed with the flags, to be said once.
	Ignored []Disagreement
	// Lease is -fallback-lease: how long the fallback outlives the last instance.
	Lease time.Duration
}

// Disagreement is $KUBE_DNS_SERVICE_HOST naming another kube-dns ClusterIP than the flags: the variable is
// only as current as the pod (it is not updated when kube-dns is recreated, and whoever later asks for the
// freed address through spec.clusterIP gets it), and anyone who may create a Service named kube-dns in the
// agent's own namespace sets it. So it never overrides the flags: Taken is what the flags say (invalid when
// they name no one ClusterIP of the family, and the family gets no fallback).
type Disagreement struct {
	Env   netip.Addr
	Taken netip.Addr
	From  string // "-kube-dns-ip" or "-localip"
}

// vote is what fallbackVote finds.
type vote struct {
	For     []netip.AddrPort
	Why     string
	Ignored []Disagreement
}

// fallbackVote is what this instance says of the fallback: the kube-dns ClusterIPs (at most one per family)
// each with our DNS port, and where they came from; or none, and why; and every disagreement of the
// environment (env, $KUBE_DNS_SERVICE_HOST) with the flags. -kube-dns-ip, when given, names them all. Else
// each family takes $KUBE_DNS_SERVICE_HOST (the Service's primary family) when the flags cannot contradict
// it, else -localip's ClusterIP. Whatever names the target, it is never covered (nft's
// DecideFallback), so the variable must never name a target other than the ClusterIP -localip intercepts: the
// fallback would cover that ClusterIP and send it, and the link-local address, to whatever answers at the
// variable's address.
func fallbackVote(o *options.Options, envValue string) vote {
	if !o.LinkLocalFallback {
		return vote{Why: "-linklocal-fallback=false"}
	}
	var env netip.Addr
	if envValue != "" {
		var err error
		if env, err = netip.ParseAddr(envValue); err != nil || env.IsUnspecified() {
			return vote{Why: fmt.Sprintf("$%s=%q is not an IP address", KubeDNSEnv, envValue)}
		}
		env = env.Unmap()
	}
	var dis []Disagreement
	ips, from := o.KubeDNSIPs, "-kube-dns-ip"
	if len(ips) > 0 {
		if i := slices.IndexFunc(ips, func(ip netip.Addr) bool { return env.IsValid() && ip.Is6() == env.Is6() }); i >= 0 && ips[i] != env {
			dis = append(dis, Disagreement{Env: env, Taken: ips[i], From: from})
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
				ips, froms = append(ips, env), append(froms, "$"+KubeDNSEnv)
			default:
				dis = append(dis, Disagreement{Env: env, Taken: local, From: "-localip"})
				if local.IsValid() {
					ips, froms = append(ips, local), append(froms, "-localip")
				}
			}
		}
		from = strings.Join(slices.Compact(froms), " and ")
	}
	if len(ips) == 0 {
		if len(dis) > 0 {
			return vote{Why: fmt.Sprintf("$%s=%v disagrees with -localip, which names no one ClusterIP of its family (give -kube-dns-ip)", KubeDNSEnv, env), Ignored: dis}
		}
		return vote{Why: fmt.Sprintf("$%s is not set, -kube-dns-ip is not given, and -localip names no ClusterIP (the kube-dns Service's)", KubeDNSEnv)}
	}
	if err := (nft.FallbackSpec{Targets: ips, Lease: o.FallbackLease}).Validate(); err != nil {
		return vote{Why: fmt.Sprintf("%s %v: %v", from, ips, err), Ignored: dis}
	}
	v := vote{For: make([]netip.AddrPort, len(ips)), Why: "kube-dns ClusterIP from " + from, Ignored: dis}
	for i, ip := range ips {
		v.For[i] = netip.AddrPortFrom(ip, o.DNSPort)
	}
	slices.SortFunc(v.For, netip.AddrPort.Compare)
	return v
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
