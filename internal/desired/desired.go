// Package desired turns the parsed flags and the few facts only the node can give into the whole desired
// state of one instance: its nftables table (nft.Spec), its interface (link.Spec), the Corefile's parameters,
// and its word on the link-local fallback. Serving (internal/supervisor), `-print-rules` and `-teardown`
// (cmd/nodelocaldns) all take their state from [Of], so what one prints is what another programs.
//
// May touch: nothing. The caller reads the environment, the filesystem and the kernel into [Facts]; [Of] only
// combines, and the same inputs give the same State.
package desired

import (
	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// KubeDNSDir is where the kube-dns ConfigMap is mounted when -kubednscm does not say (node-cache's default).
const KubeDNSDir = "/etc/kube-dns"

// Facts is what the flags cannot say: the pod's environment, the node's files and kernel, and the binary.
type Facts struct {
	// KubeDNSHost is $KUBE_DNS_SERVICE_HOST, "" when unset: the fallback's target where the flags cannot
	// contradict it (fallbackVote).
	KubeDNSHost string
	// UpstreamHost is $<UPSTREAMSVC>_SERVICE_HOST (corefile.ServiceHostEnv(-upstreamsvc)), for
	// __PILLAR__CLUSTER__DNS__; "" when unset.
	UpstreamHost string
	// KubeDNSDir says [KubeDNSDir] is a directory; read only when -kubednscm is not given.
	KubeDNSDir bool
	// NoSocket says the kernel refuses the socket expression (nft_socket missing): an intercepting table is
	// then gated on the addresses the listeners are bound to ([nft.Spec.Ungated]). The agent learns it when
	// the kernel refuses its chains; -print-rules asks the preflight.
	NoSocket bool
	// Directives are the directives the Corefile may use (dnsserver.Directives, the binary's own).
	Directives []string
}

// FromEnv is Facts with what the environment says, read through getenv (os.Getenv in production).
func FromEnv(o *options.Options, getenv func(string) string) Facts {
	return Facts{KubeDNSHost: getenv(KubeDNSEnv), UpstreamHost: getenv(corefile.ServiceHostEnv(o.UpstreamSvc))}
}

// State is one instance's whole desired state.
type State struct {
	// Table says the instance has a table at all (-setupinterface or -setupnftables): without one it touches
	// no kernel state. Without interception (NFT.NoInterception) the table still says which addresses the
	// instance needs on the shared interface.
	Table bool
	// NFT is the instance's table. Its Fallbacks are the instance's vote on the link-local fallback: written
	// in the table (while it intercepts), for every instance to read.
	NFT nft.Spec
	// Interface says the instance keeps the interface (-setupinterface).
	Interface bool
	// Link is the interface with this instance's addresses; the node carries the union of every live
	// instance's (internal/instance's node.go), and -teardown removes the one of this name.
	Link link.Spec
	// Corefile is what the Corefile is rendered from.
	Corefile Corefile
	// Fallback says why the vote is what it is.
	Fallback Fallback
}

// Corefile is what the Corefile is rendered from, besides the kube-dns ConfigMap's contents.
type Corefile struct {
	Base       string // -basecorefile
	Out        string // -conf / -corefile: where the rendered Corefile is written for operators
	KubeDNSDir string // the kube-dns ConfigMap directory; "" for none
	Params     corefile.Params
}

// Of is the desired state for the flags o and the facts f. It is pure and deterministic; the result has not
// been validated ([State.Validate]): -teardown, which has no -localip, uses it unvalidated.
func Of(o *options.Options, f Facts) State {
	vote := fallbackVote(o, f.KubeDNSHost)
	s := State{
		Table: o.SetupInterface || o.SetupNftables,
		NFT: nft.Spec{
			LocalIPs: o.LocalIPs, DNSPort: o.DNSPort, HealthPort: o.HealthPort,
			NoInterception: !o.SetupNftables, Ungated: o.SetupNftables && f.NoSocket, Fallbacks: vote.For,
		},
		Interface: o.SetupInterface,
		Link:      link.Spec{Name: o.InterfaceName, IPs: o.LocalIPs},
		Corefile: Corefile{
			Base: o.BaseCorefile, Out: o.Corefile, KubeDNSDir: o.KubeDNSConfigDir,
			Params: corefile.Params{
				LocalIPs: o.LocalIPs, DNSPort: o.DNSPort,
				ClusterDNS: f.UpstreamHost, ClusterDNSEnv: corefile.ServiceHostEnv(o.UpstreamSvc),
				PrometheusEndpoint: o.PrometheusListenAddress, Directives: f.Directives,
			},
		},
		Fallback: Fallback{Why: vote.Why, Ignored: vote.Ignored, Lease: o.FallbackLease},
	}
	if s.Corefile.KubeDNSDir == "" && f.KubeDNSDir {
		s.Corefile.KubeDNSDir = KubeDNSDir
	}
	return s
}

// Validate reports the first reason the state cannot be served, naming the bad value: the table's spec,
// then the interface's.
func (s State) Validate() error {
	if err := s.NFT.Validate(); err != nil {
		return err
	}
	return s.Link.Validate()
}
