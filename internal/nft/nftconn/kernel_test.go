package nftconn

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// progname is the comment nft adds after an owned table's name: the owning process, which depends on who runs
// the test.
var progname = regexp.MustCompile(` # progname \S+`)

// listOwn lists table inet name as nft -s prints it, without the progname comment.
func listOwn(t *testing.T, name string) string {
	t.Helper()
	return progname.ReplaceAllString(testenv.Run(t, "nft", "-s", "list", "table", "inet", name), "")
}

func TestApplyListsAsGolden(t *testing.T) {
	c := freshConn(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			rs := nft.Build(tc.spec)
			if err := c.Apply(rs); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got, want := listOwn(t, nft.TableName), readGolden(t, tc.name); got != want {
				t.Errorf("nft -s list table differs from golden %s:\n--- kernel\n%s--- golden\n%s", tc.name, got, want)
			}
		})
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	c := freshConn(t)
	rs := nft.Build(goldenCases[3].spec)
	for range 3 {
		if err := c.Apply(rs); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	listing := testenv.Run(t, "nft", "-s", "list", "ruleset")
	if n := strings.Count(listing, "table inet "+nft.TableName); n != 1 {
		t.Errorf("%d copies of the table after three applies:\n%s", n, listing)
	}
	if got, want := listOwn(t, nft.TableName), rs.Text(nft.TableName); got != want {
		t.Errorf("after three applies:\n%s\nwant:\n%s", got, want)
	}
}

func TestTeardown(t *testing.T) {
	c := freshConn(t)
	testenv.Run(t, "nft", "add", "table", "inet", "filter") // a neighbour that must survive
	if err := c.Apply(nft.Build(goldenCases[0].spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for i := range 2 {
		if err := c.Teardown(); err != nil {
			t.Fatalf("Teardown #%d: %v", i+1, err)
		}
	}
	listing := testenv.Run(t, "nft", "list", "ruleset")
	if strings.Contains(listing, nft.TableName) {
		t.Errorf("table still listed after Teardown:\n%s", listing)
	}
	if !strings.Contains(listing, "table inet filter") {
		t.Errorf("Teardown removed a foreign table:\n%s", listing)
	}
	if out, err := exec.Command("nft", "list", "table", "inet", nft.TableName).CombinedOutput(); err == nil {
		t.Errorf("nft list table succeeded after Teardown:\n%s", out)
	}
	if got, err := c.Instances(); err != nil || len(got) != 0 {
		t.Errorf("Instances after Teardown = %+v, %v; want none", got, err)
	}
}

func TestCountersAndForeignDrop(t *testing.T) {
	c := freshConn(t)
	rs := nft.Build(goldenCases[0].spec)
	if err := c.Apply(rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	counters, err := c.TableCounters(c.Table(), nft.OurChains()...)
	if err != nil {
		t.Fatalf("TableCounters: %v", err)
	}
	if len(counters) != 24 {
		t.Errorf("got %d counters, want 24: %v", len(counters), counters)
	}
	testenv.Run(t, "ip", "addr", "add", "169.254.20.10/32", "dev", "lo")
	// The package's namespace outlives the test: take the address off, or a second run (-count) finds it there.
	t.Cleanup(func() { testenv.Run(t, "ip", "addr", "del", "169.254.20.10/32", "dev", "lo") })
	// One UDP datagram to the local IP: counted by the host-network query rule (raw-output) and by the
	// filter-input accept rule on the way in over lo.
	if out, err := exec.Command("dig", "+tries=1", "+time=1", "@169.254.20.10", "example.").CombinedOutput(); err == nil {
		t.Logf("dig unexpectedly got an answer: %s", out)
	}
	counters, err = c.TableCounters(c.Table(), nft.OurChains()...)
	if err != nil {
		t.Fatalf("TableCounters: %v", err)
	}
	want := map[string]bool{
		nft.ChainRawOutput + "/" + nft.CommentSkipConntrack + ": ipv4 udp host-network queries": false,
		nft.ChainFilterInput + "/" + nft.CommentAllowDNS + ": ipv4 udp queries":                 false,
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
}
