package nftconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// These tests run everywhere, against fakeKernel; the kernel tests check the same behaviour for real.

func fakeConn(t *testing.T) (*Conn, *fakeKernel) {
	t.Helper()
	k := &fakeKernel{}
	c, err := Open(withOps(k), WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

func TestFakeApplyTwiceKeepsOneCopy(t *testing.T) {
	c, k := fakeConn(t)
	rs := nft.Build(goldenCases[3].spec)
	for range 2 {
		if err := c.Apply(rs); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	if len(k.tables) != 1 || k.flushes != 2 {
		t.Fatalf("%d tables after %d flushes, want 1 table after 2 (one batch per Apply)", len(k.tables), k.flushes)
	}
	if n := fakeRules(k.tables[0]); n != 24 || len(k.tables[0].elems[nft.SetLocal4]) != 3 {
		t.Errorf("%d rules and %d local4 elements, want 24 (node-cache's 12 per family) and 3", n, len(k.tables[0].elems[nft.SetLocal4]))
	}
	counters, err := c.TableCounters(c.Table(), nft.OurChains()...)
	if err != nil || len(counters) != 24 || counters[0].Packets != 7 || counters[0].Bytes != 700 {
		t.Errorf("TableCounters = %v, %v; want 24 counters read back", counters, err)
	}
}

func TestFakeApplyFailureKeepsOldTable(t *testing.T) {
	c, k := fakeConn(t)
	old := nft.Build(goldenCases[0].spec)
	if err := c.Apply(old); err != nil {
		t.Fatal(err)
	}
	k.flushErr = unix.EOPNOTSUPP
	err := c.Apply(nft.Build(goldenCases[2].spec))
	if !nft.IsNotSupported(err) || !strings.Contains(err.Error(), "apply table inet nodelocaldns") {
		t.Errorf("Apply = %v; want a wrapped EOPNOTSUPP naming the table", err)
	}
	ft := k.tables[0]
	if n, want := fakeRules(ft), ruleCount(old); n != want || len(ft.elems[nft.SetLocal4]) != len(old.Sets[0].Elements) {
		t.Errorf("after a failed Apply: %d rules and %d local4 elements, want the old table's %d and %d",
			n, len(ft.elems[nft.SetLocal4]), want, len(old.Sets[0].Elements))
	}
}

func fakeRules(ft *fakeTable) int {
	n := 0
	for _, rules := range ft.rules {
		n += len(rules)
	}
	return n
}

func ruleCount(r *nft.Ruleset) int {
	n := 0
	for _, c := range r.Chains {
		n += len(c.Rules)
	}
	return n
}

func TestFakeTeardown(t *testing.T) {
	c, k := fakeConn(t)
	if err := c.Teardown(); err != nil {
		t.Errorf("Teardown of an absent table = %v, want nil", err)
	}
	if err := c.Apply(nft.Build(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	if err := c.Teardown(); err != nil || len(k.tables) != 0 {
		t.Errorf("Teardown = %v, %d tables left", err, len(k.tables))
	}
	if err := c.Teardown(); err != nil || k.flushes != 2 {
		t.Errorf("second Teardown = %v after %d flushes; want nil and nothing sent", err, k.flushes)
	}
	if err := c.Apply(nft.Build(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	k.flushErr = unix.EPERM
	if err := c.Teardown(); err == nil || !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "delete table") {
		t.Errorf("Teardown with EPERM = %v; want it wrapped", err)
	}
}

// A kernel before 5.12 refuses the owner flag with EINVAL, not EOPNOTSUPP: the error still names the requirement.
func TestOwnerFlagRefusedNamesTheKernel(t *testing.T) {
	for _, errno := range []error{unix.EINVAL, unix.EOPNOTSUPP} {
		c, k := fakeConn(t)
		k.createErr = &netlink.OpError{Op: "receive", Err: errno}
		err := c.Apply(nft.Build(goldenCases[0].spec))
		if err == nil || !strings.Contains(err.Error(), "Linux 5.12 or later") {
			t.Errorf("%v from the kernel: Apply = %v; want the error to name Linux 5.12", errno, err)
		}
	}
}
