package main

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/desired"
	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
	"github.com/nodelocaldns/nodelocaldns/internal/preflight"
	"github.com/nodelocaldns/nodelocaldns/internal/supervisor"
)

// TestPrintRulesIsWhatTheAgentPrograms: for every combination of the flags that change the table, on a node
// with and without nft_socket, -print-rules prints nft.Build of desired.Of's table, which is the table of the
// agent supervisor.New builds for the same flags (the supervisor's own test holds what that agent programs, and
// what -teardown removes, to the same state), and -teardown's state names the same interface. With
// -setupnftables=false it prints no base chain: the agent then programs none.
func TestPrintRulesIsWhatTheAgentPrograms(t *testing.T) {
	env := map[string]string{desired.KubeDNSEnv: "10.96.0.10"}
	getenv := func(k string) string { return env[k] }
	for _, args := range desired.Combinations() {
		for _, noSocket := range []bool{false, true} {
			name, node := strings.Join(args, " "), fakeNode()
			if noSocket {
				name, node = name+" (no nft_socket)", fakeNode(preflight.CapSocket)
			}
			t.Run(name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				if code := printRules(parse(t, append(args, "-print-rules")...), getenv, node, &stdout, &stderr); code != 0 {
					t.Fatalf("-print-rules exited %d: %s", code, stderr.String())
				}
				printed, _, _ := strings.Cut(stdout.String(), "\n# link-local fallback")

				o := parse(t, args...)
				m, err := metrics.New(prometheus.NewRegistry(), nil)
				if err != nil {
					t.Fatal(err)
				}
				sup, err := supervisor.New(supervisor.Config{Options: o, Log: zaptest.NewLogger(t), Getenv: getenv, Metrics: m, FastPath: fastpath.NewMetrics()})
				if err != nil {
					t.Fatal(err)
				}
				served := sup.Desired()
				f := desired.FromEnv(o, getenv)
				if want := desired.Of(o, f); served.Table != want.Table || served.Interface != want.Interface ||
					!reflect.DeepEqual(served.NFT, want.NFT) || !reflect.DeepEqual(served.Link, want.Link) || !reflect.DeepEqual(served.Fallback, want.Fallback) {
					t.Fatalf("the agent's state\n%+v\nwant desired.Of's\n%+v", served, want)
				}
				f.NoSocket = noSocket
				if want := tableText(desired.Of(o, f)); printed != want {
					t.Errorf("-print-rules printed\n%s\nwant desired.Of's table\n%s", printed, want)
				}
				// The agent learns of nft_socket's absence only when the kernel refuses its chains (the
				// supervisor's test); with it, -print-rules prints the very table the agent was built with.
				if !noSocket && printed != tableText(served) {
					t.Errorf("-print-rules printed\n%s\nwant the agent's table\n%s", printed, tableText(served))
				}
				if !o.SetupNftables && strings.Contains(printed, "hook") {
					t.Errorf("-setupnftables=false printed base chains the agent never programs:\n%s", printed)
				}
				if td := supervisor.TeardownState(parse(t, append(args, "-teardown")...)); td.Link.Name != served.Link.Name {
					t.Errorf("-teardown would remove interface %q; the agent makes %q", td.Link.Name, served.Link.Name)
				}
			})
		}
	}
}

func parse(t *testing.T, args ...string) *options.Options {
	t.Helper()
	o, err := options.Parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// tableText is what -print-rules prints of st's table: nothing when it has none.
func tableText(st desired.State) string {
	if !st.Table {
		return ""
	}
	return nft.Build(st.NFT).Text(nft.TableName)
}
