package preflight

import (
	"encoding/binary"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// heldBack is the capabilities a boot of the kernel VM leaves out with its modules (test/kernel/run.sh,
// KERNEL_HOLD_BACK); none outside the VM, where the kernel is this machine's.
func heldBack() map[string]bool {
	out := map[string]bool{}
	for _, mod := range strings.Fields(os.Getenv("NODELOCALDNS_VM_HELD_BACK")) {
		switch mod {
		case "nft_socket":
			out[CapSocket] = true
		case "nft_ct", "nf_conntrack":
			out[CapConntrack] = true
		}
	}
	return out
}

// TestProbeCapabilities: the probe finds what the kernel has, and only that: everything on a full kernel, all but
// what a VM boot holds back there. The nft tool's check of the same statements (nft -c, which the kernel
// answers without committing either) is the second opinion. And the probe changes nothing: the ruleset and
// the kernel's generation count are the same after it.
func TestProbeCapabilities(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Run(t, "nft", "flush", "ruleset")
	testenv.NftApply(t, "table inet bystander {\n\tchain c {\n\t}\n}\n")
	before, gen := testenv.Run(t, "nft", "list", "ruleset"), rulesetGeneration(t)

	got, err := TryCapabilities()
	if err != nil {
		t.Fatalf("TryCapabilities: %v", err)
	}
	missing := heldBack()
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
		if p.Present == missing[p.Name] {
			t.Errorf("%s: present %v (refusal %v), want %v (held back: %q)", p.Name, p.Present, p.Refusal, !missing[p.Name], os.Getenv("NODELOCALDNS_VM_HELD_BACK"))
		}
		if p.Present != (p.Refusal == nil) {
			t.Errorf("%s: present %v with refusal %v", p.Name, p.Present, p.Refusal)
		}
	}
	if want := []string{CapOwnerFlag, CapSocket, CapConntrack, CapIPv6Write}; !slices.Equal(names, want) {
		t.Errorf("probed %v, want %v", names, want)
	}
	if after := testenv.Run(t, "nft", "list", "ruleset"); after != before {
		t.Errorf("the ruleset changed under the probe:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if g := rulesetGeneration(t); g != gen {
		t.Errorf("generation %d after the probe, %d before: the kernel committed something", g, gen)
	}

	for name, stmt := range map[string]string{
		CapSocket:    "socket wildcard 0 socket transparent 0",
		CapConntrack: "ct state established notrack",
		CapIPv6Write: "ip6 daddr set fd00::53",
	} {
		out, err := exec.Command("nft", "-c", "table inet nftcheck { chain c { "+stmt+"; }; }").CombinedOutput()
		if nftHas := err == nil; nftHas == missing[name] {
			t.Errorf("nft -c of %q: %v %s; the probe says %s present: %v", stmt, err, out, name, !missing[name])
		}
	}
}

// The probe tells a refusal from a failure to ask, against the kernel's real refusals: a table flag no kernel
// knows (the owner flag on a kernel before 5.12) and a socket key none knows (nft_socket's own EOPNOTSUPP).
func TestProbeReportsTheKernelsRefusal(t *testing.T) {
	testenv.RequireRoot(t)
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	for _, c := range []Capability{
		{Name: "flag 0x8000", tableFlags: 0x8000},
		{Name: "socket key 99", exprs: []expr.Any{&expr.Socket{Key: 99, Register: 1}}},
	} {
		if heldBack()[CapSocket] && c.exprs != nil {
			continue // refused for the missing module instead: TestProbeCapabilities
		}
		refusal, err := tryCapability(nl, c)
		if err != nil || !nft.IsNotSupported(refusal) {
			t.Errorf("%s: refusal %v, error %v; want the kernel's EOPNOTSUPP as the refusal", c.Name, refusal, err)
		}
	}
}

// rulesetGeneration is the ruleset's generation id (NFT_MSG_GETGEN), which every committed batch increments.
func rulesetGeneration(t *testing.T) uint32 {
	t.Helper()
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	msgs, err := nl.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN), Flags: netlink.Request},
		Data:   nlsock.Nfgenmsg(unix.AF_UNSPEC, 0),
	})
	if err != nil || len(msgs) != 1 || len(msgs[0].Data) < 4 {
		t.Fatalf("GETGEN: %v, %d messages", err, len(msgs))
	}
	ad, err := netlink.NewAttributeDecoder(msgs[0].Data[4:])
	if err != nil {
		t.Fatal(err)
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_GEN_ID {
			return binary.BigEndian.Uint32(ad.Bytes())
		}
	}
	t.Fatal("GETGEN: no NFTA_GEN_ID")
	return 0
}
