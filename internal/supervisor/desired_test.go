package supervisor

import (
	"io"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/desired"
	"github.com/nodelocaldns/nodelocaldns/internal/dnsserver"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

func parseArgs(t *testing.T, args ...string) *options.Options {
	t.Helper()
	o, err := options.Parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestServingAndTeardownTakeTheDesiredState: for every combination of the flags that change the table, and
// for a kernel with and without nft_socket, the agent New builds holds desired.Of's state; the instance made
// from it programs exactly nft.Build of that state's table (of the state for a kernel without nft_socket,
// once the kernel refuses the gate) and makes the interface it names carry its addresses; and -teardown's
// instance, made from its own flags the same way, removes that interface. cmd/nodelocaldns holds
// -print-rules to the same state.
func TestServingAndTeardownTakeTheDesiredState(t *testing.T) {
	env := map[string]string{desired.KubeDNSEnv: "10.96.0.10", "KUBE_DNS_UPSTREAM_SERVICE_HOST": "10.96.0.11"}
	getenv := func(k string) string { return env[k] }
	for _, args := range desired.Combinations() {
		for _, noSocket := range []bool{false, true} {
			name := strings.Join(args, " ")
			if noSocket {
				name += " (no nft_socket)"
			}
			t.Run(name, func(t *testing.T) {
				o := parseArgs(t, args...)
				s, err := New(Config{Options: o, Log: zaptest.NewLogger(t), Getenv: getenv, Metrics: testMetrics(t), FastPath: fastpath.NewMetrics()})
				if err != nil {
					t.Fatal(err)
				}
				// What New reads itself: the environment, the binary's directives, the kube-dns directory.
				f := desired.FromEnv(o, getenv)
				f.Directives = dnsserver.Directives()
				st, err := os.Stat(desired.KubeDNSDir)
				f.KubeDNSDir = err == nil && st.IsDir()
				if got := s.Desired(); !reflect.DeepEqual(got, desired.Of(o, f)) {
					t.Fatalf("New's state\n%+v\nwant desired.Of's\n%+v", got, desired.Of(o, f))
				}
				f.NoSocket = noSocket
				want := desired.Of(o, f)

				k := newFakeKernel()
				reg := &fakeReg{k: k, refuseGate: noSocket}
				r, l := handles(s.Desired(), reg, &fakeLinks{k: k})
				n := instance.New(zaptest.NewLogger(t), testMetrics(t), s.Desired().NFT, s.Desired().Link, r, l)
				start(t, n)
				switch {
				case !want.Table && (reg.last != nil || len(k.tables) > 0):
					t.Errorf("an agent with no table programmed %+v", reg.last)
				case want.Table && !reflect.DeepEqual(reg.last, nft.Build(want.NFT)):
					t.Errorf("the agent programmed\n%s\nwant nft.Build of the desired table\n%s", text(reg.last), nft.Build(want.NFT).Text(nft.TableName))
				}
				carried := slices.Clone(want.Link.IPs)
				slices.SortFunc(carried, netip.Addr.Compare)
				if got := k.link && k.name == want.Link.Name && slices.Equal(k.addrs, carried); got != want.Interface {
					t.Errorf("interface %q %v (made: %v); want %q with %v: %v", k.name, k.addrs, k.link, want.Link.Name, carried, want.Interface)
				}

				// -teardown, once the instance is gone, removes the interface the state names, and only it.
				reg.Leave(nil)
				tdst := TeardownState(parseArgs(t, append(args, "-teardown")...))
				td := instance.New(zaptest.NewLogger(t), testMetrics(t), tdst.NFT, tdst.Link, &fakeReg{k: k}, &fakeLinks{k: k})
				if err := teardown(zaptest.NewLogger(t), td, &fakeFallbackTable{}); err != nil {
					t.Fatal(err)
				}
				if wantRemoved := map[bool][]string{true: {want.Link.Name}}[want.Interface]; k.link || !slices.Equal(k.removed, wantRemoved) || len(k.tables) > 0 {
					t.Errorf("teardown removed %q, left link %v, tables %v; want %q removed, nothing left", k.removed, k.link, k.tables, wantRemoved)
				}
			})
		}
	}
}

// handles are the kernel's handles as newKernel opens them for st: a table when st has one, the interface's
// manager with -setupinterface.
func handles(st desired.State, reg instance.Registry, links instance.LinkManager) (instance.Registry, instance.LinkManager) {
	if !st.Table {
		reg = nil
	}
	if !st.Interface {
		links = nil
	}
	return reg, links
}

func text(rs *nft.Ruleset) string {
	if rs == nil {
		return "(none)"
	}
	return rs.Text(nft.TableName)
}
