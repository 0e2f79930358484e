package reconcile

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Objects the tampers aim at.
const (
	tamperChain = "filter-input"  // where a rule is deleted and a foreign one inserted
	deleteChain = "filter-output" // the chain deleted
	flushSet    = "local4"
	deleteIP    = ClusterIP // the address deleted from the link
)

// Tamper is one way of breaking the agent's kernel state, done two ways: with the admin's tools (CLI, as the
// issue words it) and through netlink from this process (Netlink, which returns once the kernel committed,
// so a benchmark knows when the damage happened to within microseconds).
type Tamper struct {
	Name string
	// NodeCache is what node-cache's design does about it (a 60 s re-check loop that only re-adds what is
	// missing); "" when it repairs it at its next tick.
	NodeCache string
	// Link is true for the tampers of the interface. Their repair may cost one confirming pass: the kernel
	// stamps no writer on link notifications (nlmsg_pid 0, unlike nftables' and address notifications), so the
	// agent cannot ignore the NEWLINK of the link it re-creates, and `ip link del` is itself a burst of five
	// notifications (down, three addresses, the link) that arrive around the repairing pass.
	Link bool
	// Owned is true for the tampers of our nftables table. The table is owned by the agent's netlink socket
	// (NFT_TABLE_F_OWNER): the kernel refuses them with EPERM, and `nft flush ruleset` skips the table. There
	// is nothing to repair; the tests check the table is intact.
	Owned   bool
	CLI     func() error
	Netlink func() error
}

// Tampers is the tamper matrix, in its order (docs/failure-model.md's table).
func Tampers() []Tamper {
	return []Tamper{
		{Name: "delete table", Owned: true,
			CLI:     nftCLI("delete table inet " + TableName),
			Netlink: nftBatch(func(c *nftables.Conn) error { c.DelTable(table()); return nil })},
		{Name: "delete one rule", Owned: true,
			CLI:     deleteRuleCLI,
			Netlink: nftBatch(deleteRuleNetlink)},
		{Name: "delete chain", Owned: true,
			CLI: nftCLI(fmt.Sprintf("delete chain inet %s %s", TableName, deleteChain)),
			Netlink: nftBatch(func(c *nftables.Conn) error {
				c.DelChain(&nftables.Chain{Table: table(), Name: deleteChain})
				return nil
			})},
		{Name: "flush set", Owned: true,
			CLI:     nftCLI(fmt.Sprintf("flush set inet %s %s", TableName, flushSet)),
			Netlink: nftBatch(func(c *nftables.Conn) error { c.FlushSet(&nftables.Set{Table: table(), Name: flushSet}); return nil })},
		{Name: "nft flush ruleset", Owned: true,
			CLI:     nftCLI("flush ruleset"),
			Netlink: nftBatch(func(c *nftables.Conn) error { c.FlushRuleset(); return nil })},
		{Name: "add foreign rule", Owned: true, NodeCache: "never: it only re-adds its own rules",
			CLI:     nftCLI(fmt.Sprintf("insert rule inet %s %s udp dport 53 drop", TableName, tamperChain)),
			Netlink: nftBatch(insertForeignRule)},
		{Name: "delete interface", Link: true,
			CLI:     ipCLI("link del " + LinkName),
			Netlink: onLink(netlink.LinkDel)},
		{Name: "delete one address", Link: true,
			CLI: ipCLI(fmt.Sprintf("addr del %s/32 dev %s", deleteIP, LinkName)),
			Netlink: onLink(func(l netlink.Link) error {
				return netlink.AddrDel(l, &netlink.Addr{IPNet: netlink.NewIPNet(netip.MustParseAddr(deleteIP).AsSlice())})
			})},
		{Name: "set interface down", Link: true, NodeCache: "never: it leaves the interface DOWN",
			CLI:     ipCLI(fmt.Sprintf("link set %s down", LinkName)),
			Netlink: onLink(netlink.LinkSetDown)},
	}
}

func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func nftCLI(cmd string) func() error { return func() error { return run("nft", cmd) } }

func ipCLI(cmd string) func() error { return func() error { return run("ip", strings.Fields(cmd)...) } }

// deleteRuleCLI deletes the first rule of tamperChain by the handle `nft -j` reports, as an admin would.
func deleteRuleCLI() error {
	out, err := exec.Command("nft", "-j", "list", "chain", "inet", TableName, tamperChain).Output()
	if err != nil {
		return fmt.Errorf("nft -j list chain: %w", err)
	}
	var listing struct {
		Nftables []struct {
			Rule *struct {
				Handle int `json:"handle"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &listing); err != nil {
		return fmt.Errorf("parse nft -j: %w", err)
	}
	for _, o := range listing.Nftables {
		if o.Rule != nil {
			return run("nft", "delete", "rule", "inet", TableName, tamperChain, "handle", strconv.Itoa(o.Rule.Handle))
		}
	}
	return fmt.Errorf("chain %s has no rule to delete", tamperChain)
}

// nftBatch runs queue on a fresh connection and commits it: one transaction, as nft does.
func nftBatch(queue func(*nftables.Conn) error) func() error {
	return func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		if err := queue(c); err != nil {
			return err
		}
		return c.Flush()
	}
}

func deleteRuleNetlink(c *nftables.Conn) error {
	rules, err := c.GetRules(table(), &nftables.Chain{Table: table(), Name: tamperChain})
	if err != nil {
		return fmt.Errorf("list chain %s: %w", tamperChain, err)
	}
	if len(rules) == 0 {
		return fmt.Errorf("chain %s has no rule to delete", tamperChain)
	}
	return c.DelRule(rules[0])
}

// insertForeignRule is `udp dport 53 drop` at the head of tamperChain: what a careless firewall script might
// add, and what would silently break DNS if left there.
func insertForeignRule(c *nftables.Conn) error {
	c.InsertRule(&nftables.Rule{
		Table: table(), Chain: &nftables.Chain{Table: table(), Name: tamperChain},
		Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(53)},
			&expr.Verdict{Kind: expr.VerdictDrop},
		},
	})
	return nil
}

func onLink(f func(netlink.Link) error) func() error {
	return func() error {
		l, err := netlink.LinkByName(LinkName)
		if err != nil {
			return fmt.Errorf("find link %s: %w", LinkName, err)
		}
		return f(l)
	}
}
