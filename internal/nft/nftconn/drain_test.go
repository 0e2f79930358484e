package nftconn

import (
	"os/exec"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// drainSpec is the dual-stack golden case: the drain table has an IPv4 and an IPv6 rule of each kind.
var drainSpec = goldenCases[2].spec

// Leave swaps the instance table for the drain table in the kernel: the instance is gone for every other
// instance, the drain table holds the reply rules, and EndDrain removes it.
func TestLeaveSwapsForTheDrainTable(t *testing.T) {
	c := freshConn(t)
	if err := c.Apply(nft.Build(drainSpec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := c.Leave(nft.Draining(drainSpec)); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if out, err := exec.Command("nft", "list", "table", "inet", nft.TableName).CombinedOutput(); err == nil {
		t.Errorf("the instance table is still listed after Leave:\n%s", out)
	}
	drain := nft.DrainTableName(nft.TableName)
	if got, want := listOwn(t, drain), readGolden(t, "draining"); got != want {
		t.Errorf("nft -s list table inet %s differs from golden draining:\n--- kernel\n%s--- golden\n%s", drain, got, want)
	}
	if got, err := c.Instances(); err != nil || len(got) != 0 {
		t.Errorf("Instances while draining = %+v, %v; want none: the drain table is no instance's", got, err)
	}
	for range 2 {
		if err := c.EndDrain(); err != nil {
			t.Fatalf("EndDrain: %v", err)
		}
	}
	if out, err := exec.Command("nft", "list", "table", "inet", drain).CombinedOutput(); err == nil {
		t.Errorf("the drain table is still listed after EndDrain:\n%s", out)
	}
}
