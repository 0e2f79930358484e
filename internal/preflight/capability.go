package preflight

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// Capability is a kernel feature our tables rely on, what a node without it costs, and how to ask the kernel
// for it without changing anything (see [TryCapabilities]).
type Capability struct {
	Name string // the metric's label (nodelocaldns_node_capability{name})
	What string // for people, with the kernel option or module a node lacks
	Cost string // what the agent does without it, for a cluster operator
	// The probe: a throwaway inet table with tableFlags and, with exprs, a regular chain holding one rule of
	// them. The kernel looks every expression up (loading its module where it can) when it takes the rule.
	tableFlags uint32
	exprs      []expr.Any
}

// Capability names.
const (
	CapOwnerFlag = "owner-flag"
	CapSocket    = "socket"
	CapConntrack = "conntrack"
	CapIPv6Write = "ipv6-rewrite"
)

// Capabilities is every kernel capability the preflight probes, in the order it reports them; another joins as
// one more entry. Each probes with the expressions the tables use, built where the tables build them.
func Capabilities() []Capability {
	return []Capability{
		{
			Name:       CapOwnerFlag,
			What:       "the table owner flag (NFT_TABLE_F_OWNER, Linux 5.12)",
			Cost:       "the agent cannot start: it creates its table with this flag, so that the table goes with the process and nothing else can change it",
			tableFlags: nlsock.TableFlagOwner,
		},
		// Kernels built without nft_socket, as of December 2026 (each with its source; docs/failure-model.md
		// names them): Azure Linux 3.0 x86_64, its 6.6 and 6.12 kernels (`# CONFIG_NFT_SOCKET is not set` in
		// microsoft/azurelinux SPECS/kernel/config, branch 3.0; a module in the release after 3.0,
		// microsoft/azurelinux#16869); Flatcar main (flatcar/Flatcar#2172, open; flatcar/scripts#4187 closed);
		// Talos before pkgs v1.14.0 (siderolabs/pkgs#1624, fixed by #1625). Debian 12 builds it as a module.
		{
			Name: CapSocket,
			What: "the socket expression (nft_socket, CONFIG_NFT_SOCKET)",
			Cost: "pods' queries are intercepted for the addresses the agent has bound instead of only while a listener is live: " +
				"a listener that fails inside the running agent, unnoticed, loses pods' queries to its address instead of sending them " +
				"to kube-dns, until the process exits (nodelocaldns_fail_open{path=\"prerouting\"} is 0); every exit, restart and reload keeps its result",
			exprs: append(nft.GateExprs(nft.GateWildcard), nft.GateExprs(nft.GateTransparent)...),
		},
		{
			Name: CapConntrack,
			What: "conntrack's expressions (nft_ct with nf_conntrack, CONFIG_NFT_CT)",
			Cost: "the agent cannot intercept: its rules skip conntrack with notrack, which nft_ct provides, so with -setupiptables (the default) its start-up fails; " +
				"the link-local fallback (ct state) cannot be written either",
			exprs: []expr.Any{&expr.Ct{Key: expr.CtKeySTATE, Register: 1}, &expr.Notrack{}},
		},
		{
			Name: CapIPv6Write,
			What: "the IPv6 address rewrite with its transport checksum fix (a payload write with NFT_PAYLOAD_L4CSUM_PSEUDOHDR)",
			Cost: "the link-local fallback cannot be written where a kube-dns ClusterIP is IPv6: while no instance serves, " +
				"queries to the local IPs no Service backs get no answer (nodelocaldns_fail_open{path=\"link-local\"} is 0)",
			exprs: nft.RewriteExprs(nft.DirTo, trialIPv6),
		},
	}
}

// Tried is one capability as the kernel answered its probe.
type Tried struct {
	Capability
	Present bool
	Refusal error // the kernel's answer when it lacks the capability
}

// trialIPv6 is the address the IPv6 rewrite's probe writes (never into a packet: the rule is never committed).
var trialIPv6 = netip.MustParseAddr("fd00::53")

// trialChain is the regular chain of a probe's table: no hook, so that no packet ever meets its rule.
const trialChain = "probe"

// trialTimeout bounds the wait for the kernel's answers (seconds under emulation, never forever).
const trialTimeout = 10 * time.Second

// TryCapabilities asks the kernel, in the caller's network namespace, which of [Capabilities] it has, and
// changes nothing: each probe is one batch that the kernel checks message by message and then aborts. The
// batch has no end message, so the kernel never commits it (net/netfilter/nfnetlink.c, nfnetlink_rcv_batch:
// without NFNL_MSG_BATCH_END it aborts, as `nft --check` relies on): no table appears, no event is sent. The
// error is for a probe that could not ask (no CAP_NET_ADMIN, no nf_tables), never for a capability missing.
func TryCapabilities() ([]Tried, error) {
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	defer nl.Close()
	var out []Tried
	for _, c := range Capabilities() {
		refusal, err := tryCapability(nl, c)
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w", c.Name, err)
		}
		out = append(out, Tried{Capability: c, Present: refusal == nil, Refusal: refusal})
	}
	return out, nil
}

// tryCapability sends c's batch and returns the kernel's refusal of the message that carries the capability, or an
// error when an earlier message or the exchange failed.
func tryCapability(nl *netlink.Conn, c Capability) (refusal error, err error) {
	msgs, err := trialMessages(c, "nodelocaldns-probe-"+strconv.Itoa(os.Getpid()))
	if err != nil {
		return nil, err
	}
	if _, err := nl.SendMessages(append([]netlink.Message{nlsock.BatchMark(unix.NFNL_MSG_BATCH_BEGIN)}, msgs...)); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	if err := nl.SetReadDeadline(time.Now().Add(trialTimeout)); err != nil {
		return nil, err
	}
	defer nl.SetReadDeadline(time.Time{})
	// Every message asks for an acknowledgement, and the kernel delivers them after the batch, one datagram
	// each, in the order of the messages (nfnl_err_deliver): the i-th answer is the i-th message's.
	answers := make([]error, len(msgs))
	for i := range msgs {
		_, answers[i] = nl.Receive()
		var oe *netlink.OpError
		if answers[i] != nil && (!errors.As(answers[i], &oe) || oe.Timeout()) {
			return nil, fmt.Errorf("answer %d of %d: %w", i+1, len(msgs), answers[i])
		}
	}
	subject := len(msgs) - 1 // the table itself for the owner flag, else the rule
	for i, a := range answers[:subject] {
		if a != nil {
			return nil, fmt.Errorf("message %d of %d refused: %w", i+1, len(msgs), a)
		}
	}
	switch a := answers[subject]; {
	case a == nil:
		return nil, nil
	case errors.Is(a, syscall.EPERM):
		return nil, a
	case nft.IsNotExist(a) || nft.IsNotSupported(a) || nft.IsOwnerFlagRefused(a):
		return a, nil
	default:
		return nil, fmt.Errorf("unexpected answer: %w", a)
	}
}

// trialMessages is c's batch, without its begin and end: the table, and the chain and the rule with c's
// expressions when it has some.
func trialMessages(c Capability, table string) ([]netlink.Message, error) {
	t, err := nlsock.NewTableMsg(table, c.tableFlags)
	if err != nil {
		return nil, err
	}
	if len(c.exprs) == 0 {
		return []netlink.Message{t}, nil
	}
	chain, err := nlsock.Msg(unix.NFT_MSG_NEWCHAIN, netlink.Create, []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: nlsock.NulTerminated(table)},
		{Type: unix.NFTA_CHAIN_NAME, Data: nlsock.NulTerminated(trialChain)},
	})
	if err != nil {
		return nil, err
	}
	var list []netlink.Attribute
	for _, e := range c.exprs {
		b, err := expr.Marshal(unix.NFPROTO_INET, e)
		if err != nil {
			return nil, fmt.Errorf("marshal %T: %w", e, err)
		}
		list = append(list, netlink.Attribute{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: b})
	}
	exprs, err := netlink.MarshalAttributes(list)
	if err != nil {
		return nil, err
	}
	rule, err := nlsock.Msg(unix.NFT_MSG_NEWRULE, netlink.Create|netlink.Append, []netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: nlsock.NulTerminated(table)},
		{Type: unix.NFTA_RULE_CHAIN, Data: nlsock.NulTerminated(trialChain)},
		{Type: unix.NLA_F_NESTED | unix.NFTA_RULE_EXPRESSIONS, Data: exprs},
	})
	if err != nil {
		return nil, err
	}
	return []netlink.Message{t, chain, rule}, nil
}
