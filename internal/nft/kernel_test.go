package nft

import (
	"os/exec"
	"strings"
	"testing"
)

func TestApplyListsAsGolden(t *testing.T) {
	c := freshConn(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			rs := Build(tc.spec)
			if err := c.Apply(rs); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got, want := sh(t, "nft", "-s", "list", "table", "inet", TableName), readGolden(t, tc.name); got != want {
				t.Errorf("nft -s list table differs from golden %s:\n--- kernel\n%s--- golden\n%s", tc.name, got, want)
			}
			drifts, err := c.Check(rs)
			if err != nil || drifts != nil {
				t.Errorf("Check right after Apply = %v, %v; want nil, nil", drifts, err)
			}
		})
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	c := freshConn(t)
	rs := Build(goldenCases[3].spec)
	for range 3 {
		if err := c.Apply(rs); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	listing := sh(t, "nft", "-s", "list", "ruleset")
	if n := strings.Count(listing, "table inet "+TableName); n != 1 {
		t.Errorf("%d copies of the table after three applies:\n%s", n, listing)
	}
	if got, want := sh(t, "nft", "-s", "list", "table", "inet", TableName), rs.String(); got != want {
		t.Errorf("after three applies:\n%s\nwant:\n%s", got, want)
	}
}

func TestApplyReplacesForeignContent(t *testing.T) {
	c := freshConn(t)
	rs := Build(goldenCases[2].spec)
	if err := c.Apply(rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	sh(t, "nft", "add", "rule", "inet", TableName, ChainFilterInput, "tcp", "dport", "22", "drop")
	sh(t, "nft", "add", "chain", "inet", TableName, "stray")
	sh(t, "nft", "add", "element", "inet", TableName, SetLocal4, "{ 192.0.2.1 }")
	if err := c.Apply(rs); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if got, want := sh(t, "nft", "-s", "list", "table", "inet", TableName), rs.String(); got != want {
		t.Errorf("Apply did not replace foreign content:\n%s\nwant:\n%s", got, want)
	}
}

func TestCheckReportsDrift(t *testing.T) {
	spec := goldenCases[2].spec // dual-stack
	rs := Build(spec)
	for _, tc := range []struct {
		name   string
		break_ []string // nft command that damages the table
		want   DriftKind
		object string
	}{
		{"table deleted", []string{"delete", "table", "inet", TableName}, DriftMissingTable, "table inet " + TableName},
		{"table dormant", []string{"add", "table", "inet", TableName, "{ flags dormant; }"}, DriftTableDormant, "table inet " + TableName},
		{"chain deleted", []string{"delete", "chain", "inet", TableName, ChainFilterOutput}, DriftMissingChain, "chain " + ChainFilterOutput},
		{"chain flushed", []string{"flush", "chain", "inet", TableName, ChainRawPrerouting}, DriftMissingRule, "rule " + ChainRawPrerouting + ": " + rs.Chains[0].Rules[1].String()},
		{"set flushed", []string{"flush", "set", "inet", TableName, SetLocal4}, DriftMissingElement, "set local4 element 169.254.20.10"},
		{"element added", []string{"add", "element", "inet", TableName, SetLocal6, "{ 2001:db8::1 }"}, DriftExtraElement, "set local6 element 2001:db8::1"},
		{"foreign rule", []string{"insert", "rule", "inet", TableName, ChainFilterInput, "tcp", "dport", "22", "drop"}, DriftExtraRule, "rule " + ChainFilterInput + ": "},
		{"duplicate rule", []string{"add", "rule", "inet", TableName, ChainFilterInput, rs.Chains[2].Rules[0].String()}, DriftExtraRule, "rule " + ChainFilterInput + ": meta key="},
		{"foreign chain", []string{"add", "chain", "inet", TableName, "stray"}, DriftExtraChain, "chain stray"},
		{"foreign set", []string{"add", "set", "inet", TableName, "stray", "{ type ipv4_addr; }"}, DriftExtraSet, "set stray"},
		{"policy changed", []string{"add", "chain", "inet", TableName, ChainFilterInput, "{ type filter hook input priority filter; policy drop; }"}, DriftChainMismatch, "chain " + ChainFilterInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := freshConn(t)
			if err := c.Apply(rs); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if d, err := c.Check(rs); err != nil || d != nil {
				t.Fatalf("Check before damage = %v, %v; want in sync", d, err)
			}
			nftArgs(t, tc.break_...)
			drifts, err := c.Check(rs)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			found := false
			for _, d := range drifts {
				if d.Kind == tc.want && strings.HasPrefix(d.Object, tc.object) {
					found = true
				}
			}
			if !found {
				t.Errorf("Check = %v; want a %q drift on %q", drifts, tc.want, tc.object)
			}
			if err := c.Apply(rs); err != nil {
				t.Fatalf("repair Apply: %v", err)
			}
			if d, err := c.Check(rs); err != nil || d != nil {
				t.Errorf("Check after repair = %v, %v; want in sync", d, err)
			}
		})
	}
}

// nftArgs runs nft with the words as one command line (so quoted comments survive).
func nftArgs(t *testing.T, words ...string) {
	t.Helper()
	nftStdin(t, strings.Join(words, " ")+"\n")
}

func TestCheckAgreesWithNftTool(t *testing.T) {
	// The other direction of the observer: nft itself loads the golden text, and our read-back accepts it.
	c := freshConn(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			sh(t, "nft", "flush", "ruleset")
			sh(t, "nft", "-f", goldenPath(tc.name))
			drifts, err := c.Check(Build(tc.spec))
			if err != nil || drifts != nil {
				t.Errorf("Check of nft -f %s = %v, %v; want in sync", tc.name, drifts, err)
			}
		})
	}
}

func TestTeardown(t *testing.T) {
	c := freshConn(t)
	sh(t, "nft", "add", "table", "inet", "filter") // a neighbour that must survive
	if err := c.Apply(Build(goldenCases[0].spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for i := range 2 {
		if err := c.Teardown(); err != nil {
			t.Fatalf("Teardown #%d: %v", i+1, err)
		}
	}
	listing := sh(t, "nft", "list", "ruleset")
	if strings.Contains(listing, TableName) {
		t.Errorf("table still listed after Teardown:\n%s", listing)
	}
	if !strings.Contains(listing, "table inet filter") {
		t.Errorf("Teardown removed a foreign table:\n%s", listing)
	}
	if out, err := exec.Command("nft", "list", "table", "inet", TableName).CombinedOutput(); err == nil {
		t.Errorf("nft list table succeeded after Teardown:\n%s", out)
	}
	d, err := c.Check(Build(goldenCases[0].spec))
	if err != nil || len(d) != 1 || d[0].Kind != DriftMissingTable {
		t.Errorf("Check after Teardown = %v, %v; want one missing-table drift", d, err)
	}
}

func TestCountersAndForeignDrop(t *testing.T) {
	c := freshConn(t)
	rs := Build(goldenCases[0].spec)
	if err := c.Apply(rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	counters, err := c.Counters()
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	if len(counters) != 24 {
		t.Errorf("got %d counters, want 24: %v", len(counters), counters)
	}
	sh(t, "ip", "addr", "add", "169.254.20.10/32", "dev", "lo")
	// One UDP datagram to the local IP: counted by the host-network query rule (raw-output) and by the
	// filter-input accept rule on the way in over lo.
	if out, err := exec.Command("dig", "+tries=1", "+time=1", "@169.254.20.10", "example.").CombinedOutput(); err == nil {
		t.Logf("dig unexpectedly got an answer: %s", out)
	}
	counters, err = c.Counters()
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	want := map[string]bool{
		ChainRawOutput + "/" + CommentSkipConntrack + ": ipv4 udp host-network queries": false,
		ChainFilterInput + "/" + CommentAllowDNS + ": ipv4 udp queries":                 false,
	}
	for _, rc := range counters {
		k := rc.Chain + "/" + rc.Comment
		if _, ok := want[k]; ok && rc.Packets > 0 && rc.Bytes > 0 {
			want[k] = true
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("counter %s did not count the query: %v", k, counters)
		}
	}

	if got, err := c.ForeignDropPolicies(); err != nil || got != nil {
		t.Errorf("ForeignDropPolicies with only our table = %v, %v", got, err)
	}
	nftStdin(t, `
table inet filter {
	chain input { type filter hook input priority 0; policy drop; }
	chain pass-through { type filter hook forward priority 0; policy drop; }
}
table ip other {
	chain out { type filter hook output priority 10; policy drop; }
	chain inbound { type filter hook input priority 0; policy accept; }
}
`)
	sh(t, "iptables", "-P", "INPUT", "DROP")
	got, err := c.ForeignDropPolicies()
	if err != nil {
		t.Fatalf("ForeignDropPolicies: %v", err)
	}
	if want := []string{"inet filter/input", "ip filter/INPUT", "ip other/out"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("ForeignDropPolicies = %q, want %q", got, want)
	}
}
