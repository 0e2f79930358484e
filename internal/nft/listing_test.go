package nft

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Every chain Build, Listening or Registration makes is one Apply asks for by name: a chain missing from instanceChains
// would survive the clear and make the next batch fail with EEXIST.
func TestInstanceChainsCoverBuild(t *testing.T) {
	for _, tc := range goldenCases {
		for _, rs := range []*Ruleset{Build(tc.spec), Listening(tc.spec), Registration(tc.spec)} {
			for _, ch := range rs.Chains {
				if !slices.Contains(instanceChains, ch.Name) {
					t.Errorf("%s: chain %s is not in instanceChains", tc.name, ch.Name)
				}
			}
		}
	}
}

// Apply and Instances never dump the node's chains (listing.go); a re-apply over every spec still replaces
// the table's whole contents.
func TestFakeNoChainDump(t *testing.T) {
	c, k := fakeConn(t)
	for _, tc := range append(goldenCases, goldenCases...) {
		if err := c.Apply(Build(tc.spec)); err != nil {
			t.Fatalf("Apply %s: %v", tc.name, err)
		}
		if got, want := len(k.tables[0].chains), len(Build(tc.spec).Chains); got != want {
			t.Fatalf("after Apply %s: %d chains, want %d", tc.name, got, want)
		}
	}
	if err := c.Apply(Registration(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	ins, err := c.Instances()
	if err != nil || len(ins) != 1 || ins[0].Serving {
		t.Errorf("Instances after registration = %+v, %v; want ours, not serving", ins, err)
	}
	if err := c.Apply(Build(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	if ins, err := c.Instances(); err != nil || len(ins) != 1 || !ins[0].Serving {
		t.Errorf("Instances after Build = %+v, %v; want ours serving", ins, err)
	}
	if k.dumps != 0 {
		t.Errorf("%d full chain dumps, want none", k.dumps)
	}
}

// The same against the kernel, next to a few thousand chains of a foreign table (one nft -f batch): Apply
// replaces our table, and Instances tells a registered instance from a serving one.
func TestOwnTablesAmongForeignChains(t *testing.T) {
	c := freshConn(t)
	var b strings.Builder
	b.WriteString("add table ip big\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "add chain ip big c%d\n", i)
	}
	testenv.NftApply(t, b.String())
	for _, rs := range []*Ruleset{Registration(goldenCases[3].spec), Build(goldenCases[3].spec), Build(goldenCases[6].spec), Build(goldenCases[2].spec)} {
		if err := c.Apply(rs); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if got, want := listOwn(t, TableName), rs.Text(TableName); got != want {
			t.Fatalf("table lists as:\n%s\nwant:\n%s", got, want)
		}
	}
	c2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Apply(Registration(goldenCases[0].spec)); err != nil {
		t.Fatal(err)
	}
	ins, err := c.Instances()
	if err != nil || len(ins) != 2 || !ins[0].Serving || ins[1].Serving || ins[1].Self {
		t.Errorf("Instances = %+v, %v; want ours serving and the second registered", ins, err)
	}
	if err := c2.Apply(Build(goldenCases[6].spec)); err != nil { // -setupiptables=false: only the marker chain
		t.Fatal(err)
	}
	if ins, err := c.Instances(); err != nil || len(ins) != 2 || !ins[1].Serving {
		t.Errorf("Instances = %+v, %v; want the second serving", ins, err)
	}
}
