package reconcile

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Observer tells from the outside whether the agent's table and interface are whole: a second netlink reader,
// sharing no code with the agent, woken by the kernel's own notifications rather than by polling.
type Observer struct {
	nft      *nftables.Conn
	linkName string
	wantIPs  []string // "169.254.20.10/32", sorted
	baseline string   // the table's fingerprint when known good; "" until Baseline
	socks    []*mdnl.Conn
	wake     chan struct{}
}

// NewObserver subscribes to nftables and link/address notifications and opens a reader.
func NewObserver(linkName string, ips []netip.Addr) (*Observer, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("open nftables reader: %w", err)
	}
	o := &Observer{nft: c, linkName: linkName, wake: make(chan struct{}, 1)}
	for _, ip := range ips {
		o.wantIPs = append(o.wantIPs, netip.PrefixFrom(ip, ip.BitLen()).String())
	}
	slices.Sort(o.wantIPs)
	subs := []struct {
		family int
		groups []uint32
	}{
		{unix.NETLINK_NETFILTER, []uint32{unix.NFNLGRP_NFTABLES}},
		{unix.NETLINK_ROUTE, []uint32{unix.RTNLGRP_LINK, unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR}},
	}
	for _, s := range subs {
		sock, err := mdnl.Dial(s.family, nil)
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("dial netlink family %d: %w", s.family, err)
		}
		o.socks = append(o.socks, sock)
		for _, g := range s.groups {
			if err := sock.JoinGroup(g); err != nil {
				o.Close()
				return nil, fmt.Errorf("join netlink group %d: %w", g, err)
			}
		}
		go o.relay(sock)
	}
	return o, nil
}

// relay turns every notification into a wake-up. An overrun (ENOBUFS) is a wake-up too: the observer re-reads
// the whole state on each, so a lost event costs nothing.
func (o *Observer) relay(sock *mdnl.Conn) {
	for {
		_, err := sock.Receive()
		if err != nil && !errors.Is(err, unix.ENOBUFS) {
			return // closed
		}
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

// Close releases the sockets.
func (o *Observer) Close() {
	for _, s := range o.socks {
		s.Close()
	}
	o.nft.CloseLasting()
}

// Baseline records the table as it is now as the good state. Call it once the table was checked by other
// means (the `nft` listing equals -print-rules).
func (o *Observer) Baseline() error {
	fp, err := o.tableFingerprint()
	if err != nil {
		return err
	}
	if fp == "" {
		return errors.New("baseline: table inet nodelocaldns is absent")
	}
	o.baseline = fp
	return nil
}

// Whole reports whether the table equals the baseline and the link is UP carrying exactly the listen IPs
// (besides the IPv6 link-local address the kernel adds); why says what differs.
func (o *Observer) Whole() (ok bool, why string, err error) {
	fp, err := o.tableFingerprint()
	if transient(err) {
		return false, "table changed while being read", nil
	}
	if err != nil {
		return false, "", err
	}
	if fp != o.baseline {
		if fp == "" {
			return false, "table absent", nil
		}
		return false, "table differs:\n" + fp, nil
	}
	return o.linkWhole()
}

// WaitWhole re-checks on every notification (and every 50 ms as a safety net) until the state is whole, and
// returns the time the successful check ended: the repair happened at or before it. A read that fails is
// retried at once: it raced with a write (google/nftables loses the errno of some, so they cannot all be
// told apart), and only the deadline ends the wait.
func (o *Observer) WaitWhole(timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		ok, why, err := o.Whole()
		if ok {
			return time.Now(), nil
		}
		retry := 50 * time.Millisecond
		if err != nil {
			why, retry = "read failed: "+err.Error(), time.Millisecond
		}
		select {
		case <-o.wake:
		case <-time.After(retry):
		case <-deadline:
			return time.Time{}, fmt.Errorf("not repaired within %v: %s", timeout, why)
		}
	}
}

func (o *Observer) linkWhole() (bool, string, error) {
	l, err := netlink.LinkByName(o.linkName)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return false, "link absent", nil
		}
		return false, "", fmt.Errorf("read link %s: %w", o.linkName, err)
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		return false, "link down", nil
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if transient(err) {
		return false, "link changed while being read", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read addresses of %s: %w", o.linkName, err)
	}
	var have []string
	for _, a := range addrs {
		if a.IP.To4() == nil && a.IP.IsLinkLocalUnicast() {
			continue // fe80::/64, the kernel's own
		}
		have = append(have, a.IPNet.String())
	}
	slices.Sort(have)
	if !slices.Equal(have, o.wantIPs) {
		return false, fmt.Sprintf("link addresses %v, want %v", have, o.wantIPs), nil
	}
	return true, "", nil
}

// tableFingerprint renders our table as read back, without handles and counter values: sets with sorted
// elements, chains by name with type, hook, priority and policy, and each chain's rules in order. "" when the
// table is absent.
func (o *Observer) tableFingerprint() (string, error) {
	t, err := o.nft.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", fmt.Errorf("read table: %w", err)
	}
	var b strings.Builder
	sets, err := o.nft.GetSets(t)
	if err != nil {
		return "", fmt.Errorf("read sets: %w", err)
	}
	slices.SortFunc(sets, func(x, y *nftables.Set) int { return strings.Compare(x.Name, y.Name) })
	for _, s := range sets {
		elems, err := o.nft.GetSetElements(s)
		if err != nil {
			return "", fmt.Errorf("read elements of set %s: %w", s.Name, err)
		}
		var keys []string
		for _, e := range elems {
			keys = append(keys, fmt.Sprintf("%x", e.Key))
		}
		slices.Sort(keys)
		fmt.Fprintf(&b, "set %s type %s flags %v: %v\n", s.Name, s.KeyType.Name, s.Interval, keys)
	}
	chains, err := o.nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return "", fmt.Errorf("read chains: %w", err)
	}
	slices.SortFunc(chains, func(x, y *nftables.Chain) int { return strings.Compare(x.Name, y.Name) })
	for _, ch := range chains {
		if ch.Table.Name != t.Name {
			continue
		}
		fmt.Fprintf(&b, "chain %s type %s hook %v prio %v policy %v\n", ch.Name, ch.Type, deref(ch.Hooknum), deref(ch.Priority), deref(ch.Policy))
		rules, err := o.nft.GetRules(t, ch)
		if err != nil {
			return "", fmt.Errorf("read rules of chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			b.WriteString("  rule")
			for _, e := range r.Exprs {
				if _, ok := e.(*expr.Counter); ok {
					b.WriteString(" counter") // values change with traffic
					continue
				}
				fmt.Fprintf(&b, " %T%+v", e, e)
			}
			fmt.Fprintf(&b, " userdata %q\n", r.UserData)
		}
	}
	return b.String(), nil
}

// transient reports the errors of reading an object that a concurrent change just removed.
func transient(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
