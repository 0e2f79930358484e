package supervisor

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// -teardown that cannot remove the interface fails, naming it, instead of reporting success; one that can
// succeeds.
func TestTeardownReportsTheInterfaceItCouldNotRemove(t *testing.T) {
	k := newFakeKernel()
	k.link, k.name, k.addrs = true, "nodelocaldns", addrs("169.254.20.10")
	k.removeErr = unix.EPERM
	td := func() *instance.Node {
		return instance.New(zaptest.NewLogger(t), testMetrics(t), nft.Spec{}, link.Spec{Name: "nodelocaldns"}, &fakeReg{k: k}, &fakeLinks{k: k})
	}
	fb := &fakeFallbackTable{listing: "table inet nodelocaldns-fallback {}"}
	err := teardown(zaptest.NewLogger(t), td(), fb)
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), `interface "nodelocaldns" left in place`) {
		t.Fatalf("teardown with a failing removal = %v; want an error naming the interface left in place", err)
	}
	if !k.link {
		t.Fatal("the fake removed the interface it refused to remove")
	}
	k.removeErr = nil
	if err := teardown(zaptest.NewLogger(t), td(), fb); err != nil || k.link || fb.listing != "" || fb.deletedLive != 0 {
		t.Fatalf("teardown = %v with link %v, fallback %q, %d deleted while redirecting; want both removed, the fallback stopped first",
			err, k.link, fb.listing, fb.deletedLive)
	}
}

// -teardown says what it did to the interface: removed the one there was, or found none (on a node where nothing
// of ours is left it must not claim a removal).
func TestTeardownSaysWhetherThereWasAnInterface(t *testing.T) {
	for _, tc := range []struct {
		name    string
		present bool
		want    string
	}{
		{"present", true, "last instance out; removed the interface"},
		{"absent", false, "last instance out; no interface to remove"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newFakeKernel()
			if tc.present {
				k.link, k.name, k.addrs = true, "nodelocaldns", addrs("169.254.20.10")
			}
			core, logs := observer.New(zap.InfoLevel)
			n := instance.New(zap.New(core), testMetrics(t), nft.Spec{}, link.Spec{Name: "nodelocaldns"}, &fakeReg{k: k}, &fakeLinks{k: k})
			if err := teardown(zap.New(core), n, &fakeFallbackTable{}); err != nil || k.link {
				t.Fatalf("teardown = %v with link %v; want nil and no link", err, k.link)
			}
			var said []string
			for _, e := range logs.FilterMessageSnippet("interface").All() {
				said = append(said, e.Message)
			}
			if !slices.Equal(said, []string{tc.want}) {
				t.Errorf("interface lines %q, want [%q]", said, tc.want)
			}
		})
	}
}

// -teardown beside a live instance keeps the fallback as it keeps the interface: the instance needs both.
func TestTeardownKeepsTheFallbackForLiveInstances(t *testing.T) {
	k := newFakeKernel()
	live := instance.New(zaptest.NewLogger(t), testMetrics(t), nft.Spec{LocalIPs: addrs("169.254.20.10"), DNSPort: 53, HealthPort: 8080},
		link.Spec{Name: "nodelocaldns"}, &fakeReg{k: k}, &fakeLinks{k: k})
	start(t, live)
	fb := &fakeFallbackTable{listing: "table inet nodelocaldns-fallback {}"}
	td := instance.New(zaptest.NewLogger(t), testMetrics(t), nft.Spec{}, link.Spec{Name: "nodelocaldns"}, &fakeReg{k: k}, &fakeLinks{k: k})
	if err := teardown(zaptest.NewLogger(t), td, fb); err != nil || fb.listing == "" || !k.link {
		t.Fatalf("teardown beside a live instance = %v, fallback %q, link %v; want both kept", err, fb.listing, k.link)
	}
}
