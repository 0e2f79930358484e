// Package preflight is a node's own answer to "will this work here?": which of the kernel capabilities the
// agent relies on the node lacks, and what each costs. It asks before anything is touched, and changes
// nothing: the nftables capabilities through [TryCapabilities] (capability.go), IPv6 (only where an IPv6
// -localip is configured) from /proc. `-print-rules` prints the report, the agent logs it at start and exports
// it (nodelocaldns_node_capability{name}), so that the dashboard and the alerts name the nodes that run degraded.
//
// May touch: the kernel read-only (nftables batches it checks then aborts; /proc/sys/net/ipv6).
package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// CapIPv6 names the IPv6 capability, beside nft's.
const CapIPv6 = "ipv6"

// Finding is one capability on this node.
type Finding struct {
	Name, What, Cost string
	Present          bool
	Known            bool   // false: not tried (no CAP_NET_ADMIN)
	Why              string // the kernel's refusal, or what told us
}

// Report is the preflight of one node.
type Report struct {
	Release  string
	Findings []Finding
	NotTried error // the nftables capabilities could not be asked for; Findings then judge the owner flag by Release
}

// Node is what a check reads: the kernel release, the nftables probes and /proc. [Host] is the real one.
type Node struct {
	Release  func() (string, error)
	Try      func() ([]Tried, error)
	ReadFile func(string) ([]byte, error)
}

// Host is the node this process runs on, in its network namespace.
func Host() Node {
	return Node{Release: release, Try: TryCapabilities, ReadFile: os.ReadFile}
}

func release() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// ipv6Sysctl is the value new interfaces (ours among them) take; writing net.ipv6.conf.all.disable_ipv6
// writes it too (net/ipv6/addrconf.c, addrconf_disable_ipv6). Without IPv6 in the kernel (ipv6.disable=1),
// /proc/sys/net/ipv6 is absent.
const ipv6Sysctl = "/proc/sys/net/ipv6/conf/default/disable_ipv6"

// Check judges the node for an agent serving localIPs.
func (n Node) Check(localIPs []netip.Addr) Report {
	var r Report
	rel, err := n.Release()
	if err != nil {
		rel = "(release not read: " + err.Error() + ")"
	}
	r.Release = rel
	probed, err := n.Try()
	if err != nil {
		r.NotTried = err
		for _, c := range Capabilities() {
			f := Finding{Name: c.Name, What: c.What, Cost: c.Cost}
			if c.Name == CapOwnerFlag {
				f.Present, f.Known, f.Why = byRelease(rel)
			}
			r.Findings = append(r.Findings, f)
		}
	}
	for _, p := range probed {
		f := Finding{Name: p.Name, What: p.What, Cost: p.Cost, Present: p.Present, Known: true}
		if p.Refusal != nil {
			f.Why = "the kernel refused its probe: " + p.Refusal.Error()
		}
		r.Findings = append(r.Findings, f)
	}
	if slices.ContainsFunc(localIPs, netip.Addr.Is6) {
		r.Findings = append(r.Findings, n.ipv6())
	}
	return r
}

func (n Node) ipv6() Finding {
	f := Finding{Name: CapIPv6, What: "IPv6 (an IPv6 -localip is configured)", Known: true,
		Cost: "the agent cannot start: the kernel refuses the IPv6 local IPs on its interface (permission denied)"}
	b, err := n.ReadFile(ipv6Sysctl)
	switch v := strings.TrimSpace(string(b)); {
	case errors.Is(err, fs.ErrNotExist):
		f.Why = "no " + ipv6Sysctl + ": the kernel has no IPv6 (booted with ipv6.disable=1, or built without it)"
	case err != nil:
		f.Known, f.Why = false, err.Error()
	case v != "0":
		f.Why = "net.ipv6.conf.default.disable_ipv6 = " + v
	default:
		f.Present = true
	}
	return f
}

// ownerFlagSince is the first kernel with NFT_TABLE_F_OWNER.
var ownerFlagSince = [2]int{5, 12}

// byRelease judges the owner flag by the kernel release, when it cannot be probed: a distribution kernel that
// backports the flag to an older release is judged too old, and the reason says so.
func byRelease(release string) (present, known bool, why string) {
	major, minor, ok := kernelVersion(release)
	if !ok {
		return false, false, fmt.Sprintf("kernel release %q not understood", release)
	}
	if major < ownerFlagSince[0] || major == ownerFlagSince[0] && minor < ownerFlagSince[1] {
		return false, true, fmt.Sprintf("judged by the kernel release, older than %d.%d (a kernel that backports the flag has it: the agent's start-up says for sure); "+
			"the agent fails with: %s", ownerFlagSince[0], ownerFlagSince[1], nft.ErrNoOwnerFlag)
	}
	return true, true, fmt.Sprintf("judged by the kernel release (%d.%d or later)", ownerFlagSince[0], ownerFlagSince[1])
}

func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	minorDigits := parts[1] // "12" of "5.12-rc1" too
	if i := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = parts[1][:i]
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(minorDigits)
	return major, minor, err1 == nil && err2 == nil
}
