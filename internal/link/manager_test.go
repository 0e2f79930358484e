package link

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// Conventions: 169.254.20.10 is the link-local listen IP, 10.96.0.10 the kube-dns ClusterIP, fd00::10 an IPv6
// listen IP, 192.0.2.0/24 addresses someone else put on our link.
func testSpec() Spec {
	return Spec{Name: "nodelocaldns", IPs: []netip.Addr{
		netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")}}
}

func newFakeManager(t *testing.T, k *fakeKernel, opts ...Option) (*Manager, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	m, err := New(zap.New(core), append(opts, withOps(k))...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(m.Close)
	k.writes = nil // the trial's create and delete
	return m, logs
}

func TestProbeKind(t *testing.T) {
	tests := []struct {
		name     string
		kinds    []string
		opts     []Option
		stale    bool // a probe link left over from a crash
		want     string
		warnings int
	}{
		{"dummy supported", []string{KindDummy, KindIfb}, nil, false, KindDummy, 0},
		{"no dummy kind", []string{KindIfb}, nil, false, KindIfb, 1},
		{"forced fallback", []string{KindDummy, KindIfb}, []Option{withoutDummy()}, false, KindIfb, 1},
		{"stale probe link", []string{KindDummy}, nil, true, KindDummy, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newFakeKernel(tt.kinds...)
			if tt.stale {
				k.add(trialName, KindDummy, false)
			}
			m, logs := newFakeManager(t, k, tt.opts...)
			if m.Kind() != tt.want {
				t.Errorf("Kind() = %q, want %q", m.Kind(), tt.want)
			}
			if n := logs.FilterMessage("using ifb links instead of dummy").Len(); n != tt.warnings {
				t.Errorf("fallback warnings = %d, want %d", n, tt.warnings)
			}
			if _, ok := k.links[trialName]; ok {
				t.Errorf("probe link %q left behind", trialName)
			}
		})
	}
}

func TestProbeWarningSaysWhy(t *testing.T) {
	_, logs := newFakeManager(t, newFakeKernel(KindIfb))
	entries := logs.FilterMessage("using ifb links instead of dummy").All()
	if len(entries) != 1 {
		t.Fatalf("got %d warnings, want 1", len(entries))
	}
	why := entries[0].ContextMap()["reason"].(string)
	if !strings.Contains(why, "no dummy link kind") || !strings.Contains(why, "not supported") {
		t.Errorf("reason %q does not say the kernel lacks dummy (EOPNOTSUPP)", why)
	}
}

func TestNewFailsWithoutAnyKind(t *testing.T) {
	k := newFakeKernel()
	_, err := New(zap.NewNop(), withOps(k))
	if err == nil || !errors.Is(err, unix.EOPNOTSUPP) || !strings.Contains(err.Error(), "ifb") {
		t.Fatalf("New() error = %v, want EOPNOTSUPP naming both kinds", err)
	}
	if !k.closed {
		t.Error("handle not closed after a failed New")
	}
}

func TestNewFailsOnProbePermissionError(t *testing.T) {
	k := newFakeKernel(KindDummy)
	k.fail["LinkAdd"] = unix.EPERM
	if _, err := New(zap.NewNop(), withOps(k)); !errors.Is(err, unix.EPERM) {
		t.Fatalf("New() error = %v, want EPERM (not a silent fallback)", err)
	}
}

func TestEnsureCreatesThenIsIdempotent(t *testing.T) {
	for _, kind := range []string{KindDummy, KindIfb} {
		t.Run(kind, func(t *testing.T) {
			k := newFakeKernel(kind)
			m, _ := newFakeManager(t, k)
			changes, err := m.Ensure(testSpec())
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if len(changes) != 5 || changes[0] != "create "+kind+" link nodelocaldns" {
				t.Errorf("changes = %q, want create, up and three addresses", changes)
			}
			l := k.links["nodelocaldns"]
			if l == nil || l.kind != kind || !l.up || len(l.addrs) != 3 {
				t.Fatalf("link after Ensure = %+v", l)
			}
			writes := len(k.writes)
			if changes, err := m.Ensure(testSpec()); err != nil || changes != nil {
				t.Errorf("second Ensure = %q, %v; want no changes", changes, err)
			}
			if len(k.writes) != writes {
				t.Errorf("second Ensure wrote %q", k.writes[writes:])
			}
		})
	}
}

func TestEnsureRepairsDrift(t *testing.T) {
	k := newFakeKernel(KindDummy)
	m, _ := newFakeManager(t, k)
	k.add("nodelocaldns", KindDummy, false, "169.254.20.10/32", "192.0.2.7/24", "fe80::1/64")
	want := []string{
		"set link nodelocaldns up",
		"add address 10.96.0.10/32 to nodelocaldns",
		"add address fd00::10/128 to nodelocaldns",
		"remove address 192.0.2.7/24 from nodelocaldns",
	}
	changes, err := m.Ensure(testSpec())
	if err != nil || !slices.Equal(changes, want) {
		t.Fatalf("Ensure = %q, %v; want %q", changes, err, want)
	}
	got := k.links["nodelocaldns"].addrs
	slices.SortFunc(got, comparePrefix)
	if s := prefixStrings(got); !slices.Equal(s, []string{"10.96.0.10/32", "169.254.20.10/32", "fd00::10/128", "fe80::1/64"}) {
		t.Errorf("addresses after repair = %q", s)
	}
}

func TestEnsureRefusesForeignLink(t *testing.T) {
	k := newFakeKernel(KindDummy)
	m, _ := newFakeManager(t, k)
	k.add("nodelocaldns", "veth", true, "192.0.2.1/24")
	if _, err := m.Ensure(testSpec()); err == nil || !strings.Contains(err.Error(), `kind "veth"`) {
		t.Fatalf("Ensure on a veth = %v, want a refusal", err)
	}
	if _, err := m.Remove("nodelocaldns"); err == nil {
		t.Fatal("Remove deleted a veth that is not ours")
	}
	if len(k.writes) != 0 {
		t.Errorf("wrote %q to a foreign link", k.writes)
	}
}

func TestEnsureErrorsNameTheLink(t *testing.T) {
	tests := []struct {
		method string
		err    error
		done   int // changes reported before the failure
	}{
		{"LinkByName", unix.EIO, 0},
		{"LinkAdd", unix.EPERM, 0},
		{"LinkSetUp", unix.EPERM, 1},
		{"AddrReplace", unix.EINVAL, 2},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			k := newFakeKernel(KindDummy)
			m, _ := newFakeManager(t, k)
			k.fail[tt.method] = tt.err
			changes, err := m.Ensure(testSpec())
			if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), `"nodelocaldns"`) {
				t.Errorf("Ensure error = %v, want %v naming the link", err, tt.err)
			}
			if len(changes) != tt.done {
				t.Errorf("changes before failure = %q, want %d", changes, tt.done)
			}
		})
	}
}

func TestEnsureAdoptsLinkCreatedConcurrently(t *testing.T) {
	k := newFakeKernel(KindDummy)
	m, _ := newFakeManager(t, k)
	// A fake whose first lookup misses, as if another writer created the link between lookup and LinkAdd.
	racy := &racyKernel{fakeKernel: k}
	m.ops = racy
	if _, err := m.Ensure(testSpec()); err != nil {
		t.Fatalf("Ensure after EEXIST race: %v", err)
	}
	if l := k.links["nodelocaldns"]; l == nil || !l.up || len(l.addrs) != 3 {
		t.Fatalf("link after race = %+v", l)
	}
}

// racyKernel hides the link on the first lookup, then lets another writer create it just before our LinkAdd.
type racyKernel struct {
	*fakeKernel
	raced bool
}

func (r *racyKernel) LinkByName(name string) (netlink.Link, error) {
	if !r.raced {
		return nil, netlink.LinkNotFoundError{}
	}
	return r.fakeKernel.LinkByName(name)
}

func (r *racyKernel) LinkAdd(link netlink.Link) error {
	if !r.raced {
		r.raced = true
		r.add(link.Attrs().Name, link.Type(), false)
	}
	return r.fakeKernel.LinkAdd(link)
}

func TestEnsureIgnoresAddressAlreadyGone(t *testing.T) {
	k := newFakeKernel(KindDummy)
	m, _ := newFakeManager(t, k)
	k.add("nodelocaldns", KindDummy, true, "169.254.20.10/32", "10.96.0.10/32", "fd00::10/128", "192.0.2.7/32")
	k.fail["AddrDel"] = unix.EADDRNOTAVAIL
	if _, err := m.Ensure(testSpec()); err != nil {
		t.Fatalf("Ensure when the stray address vanished meanwhile: %v", err)
	}
}

func TestRemove(t *testing.T) {
	k := newFakeKernel(KindDummy)
	m, _ := newFakeManager(t, k)
	if removed, err := m.Remove("nodelocaldns"); err != nil || removed {
		t.Fatalf("Remove of an absent link = %v, %v; want false, nil", removed, err)
	}
	// node-cache's dummy of the same name (a rollback): not ours, left alone.
	k.add("nodelocaldns", KindDummy, true, "169.254.20.10/32")
	if _, err := m.Remove("nodelocaldns"); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Remove of a dummy we did not create = %v, want ErrNotOurs", err)
	}
	if _, ok := k.links["nodelocaldns"]; !ok {
		t.Fatal("Remove deleted a dummy we did not create")
	}
	delete(k.links, "nodelocaldns")
	if _, err := m.Ensure(testSpec()); err != nil {
		t.Fatal(err)
	}
	if removed, err := m.Remove("nodelocaldns"); err != nil || !removed {
		t.Fatalf("Remove = %v, %v; want true, nil", removed, err)
	}
	if _, ok := k.links["nodelocaldns"]; ok {
		t.Fatal("link still there after Remove")
	}
	k.add("nodelocaldns", KindIfb, true)
	k.links["nodelocaldns"].alias = OwnerAlias
	k.fail["LinkDel"] = unix.EPERM
	if _, err := m.Remove("nodelocaldns"); !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), `"nodelocaldns"`) {
		t.Fatalf("Remove error = %v, want EPERM naming the link", err)
	}
}

func TestEnsureRefusesInvalidSpec(t *testing.T) {
	k := newFakeKernel(KindIfb)
	m, _ := newFakeManager(t, k)
	if _, err := m.Ensure(Spec{Name: "ifb0", IPs: testSpec().IPs}); err == nil {
		t.Fatal("Ensure accepted an invalid spec")
	}
	if len(k.writes) != 0 {
		t.Fatalf("Ensure of an invalid spec wrote %q", k.writes)
	}
}

func prefixStrings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}
