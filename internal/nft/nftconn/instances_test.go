package nftconn

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestOwnedTable pins what the design rests on: another process, root included, can neither change nor delete
// our table (EPERM), `nft flush ruleset` leaves it, and it vanishes the moment our socket closes.
func TestOwnedTable(t *testing.T) {
	c := freshConn(t)
	rs := nft.Build(goldenCases[2].spec)
	if err := c.Apply(rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := listOwn(t, nft.TableName)
	for _, tamper := range []string{
		"delete table inet " + nft.TableName,
		"add table inet " + nft.TableName + " { flags dormant; }",
		"delete chain inet " + nft.TableName + " " + nft.ChainFilterOutput,
		"flush chain inet " + nft.TableName + " " + nft.ChainRawPrerouting,
		"flush set inet " + nft.TableName + " " + nft.SetLocal4,
		"add element inet " + nft.TableName + " " + nft.SetLocal6 + " { 2001:db8::1 }",
		"insert rule inet " + nft.TableName + " " + nft.ChainFilterInput + " tcp dport 22 drop",
		"add chain inet " + nft.TableName + " stray",
	} {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(tamper + "\n")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Operation not permitted") {
			t.Errorf("nft %s: %v %s; want EPERM", tamper, err, out)
		}
	}
	testenv.Run(t, "nft", "flush", "ruleset")
	if got := listOwn(t, nft.TableName); got != want {
		t.Errorf("after the tampers and nft flush ruleset:\n%s\nwant:\n%s", got, want)
	}

	// A second instance gets the next name; each sees both, and itself.
	c2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Apply(nft.Registration(goldenCases[0].spec)); err != nil {
		t.Fatalf("second instance: %v", err)
	}
	if c2.Table() != nft.TableName+"-1" {
		t.Errorf("second instance's table = %q, want %s-1", c2.Table(), nft.TableName)
	}
	// Printed under the name the kernel listed it with, not the first instance's.
	if got, want := listOwn(t, c2.Table()), nft.Registration(goldenCases[0].spec).Text(c2.Table()); got != want {
		t.Errorf("second instance's table lists as:\n%s\nwant:\n%s", got, want)
	}
	ins, err := c.Instances()
	if err != nil || len(ins) != 2 || !ins[0].Self || !ins[0].Serving || ins[1].Self || ins[1].Serving ||
		len(ins[1].IPs) != 1 || ins[1].IPs[0].String() != "169.254.20.10" {
		t.Errorf("Instances = %+v, %v; want ours serving and the second registered with 169.254.20.10", ins, err)
	}

	// Closing the socket is the kernel's teardown. An unowned leftover of an earlier version is not an
	// instance, and DeleteLegacy removes it.
	c2.Close()
	testenv.NftApply(t, "add table inet "+nft.TableName+"-7\n")
	if ins, err := c.Instances(); err != nil || len(ins) != 1 || !ins[0].Self {
		t.Errorf("Instances after the second closed = %+v, %v; want ours only", ins, err)
	}
	if got, err := c.DeleteLegacy(); err != nil || len(got) != 1 || got[0] != nft.TableName+"-7" {
		t.Errorf("DeleteLegacy = %v, %v", got, err)
	}
	if out := testenv.Run(t, "nft", "list", "tables"); strings.Contains(out, nft.TableName+"-") {
		t.Errorf("tables left after close and DeleteLegacy:\n%s", out)
	}
}
