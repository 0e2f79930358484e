package nft

import (
	"errors"
	"net/netip"

	"github.com/nodelocaldns/nodelocaldns/internal/addr"
)

// Spec is everything the table depends on. The zero ports are invalid; callers pass the values of
// `-dns.port` and `-health-port`.
type Spec struct {
	// LocalIPs are the listen IPs (the link-local IP and usually the kube-dns ClusterIP), IPv4 and IPv6 mixed.
	LocalIPs []netip.Addr
	// DNSPort is the port the cache answers on (`-dns.port`, 53).
	DNSPort uint16
	// HealthPort is the port of the Corefile's health plugin (`-health-port`, 8080).
	HealthPort uint16
	// Ungated drops the socket gate from the prerouting rules (see [Gate]), for a kernel without nft_socket:
	// they match the bound sets (bound4, bound6) instead, the addresses the agent knows a listener is bound to.
	// What only the kernel could know (a listener gone inside a process that still runs) then blackholes pods'
	// queries until the table goes with the process. A stopped process blackholes them with the gate too.
	Ungated bool
	// Fallbacks is the instance's word on the link-local fallback (sets fallback4 and fallback6): the kube-dns
	// ClusterIPs it would send queries to, at most one per family, each with its DNS port; empty while it
	// wants no fallback.
	Fallbacks []netip.AddrPort
	// NoInterception (-setupiptables=false) programs no base chain at all, only the sets and a marker chain.
	NoInterception bool
	// StepAside are local IPs the instance does not intercept (a foreign drop covers them; the supervisor's
	// foreign.go): their queries go to kube-dns as if no instance served them.
	StepAside []netip.Addr
	// Unbound are the local IPs no DNS listener is bound to (a Corefile whose `bind` leaves them out). Pods'
	// queries to them already go to kube-dns (the prerouting rules are gated on a listener); the host-network
	// rules, which cannot be gated so, leave them alone too: the ClusterIP then goes through kube-proxy and the
	// link-local address through the fallback, instead of being refused.
	Unbound []netip.Addr
}

// Validate reports the first reason the spec cannot be programmed, naming the bad value.
func (s Spec) Validate() error {
	if err := addr.CheckListenIPs(s.LocalIPs); err != nil {
		return err
	}
	if s.DNSPort == 0 {
		return errors.New("dns port 0")
	}
	if s.HealthPort == 0 {
		return errors.New("health port 0")
	}
	return nil
}
