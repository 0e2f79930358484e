package nft

import (
	"os"
	"testing"
)

// drainSpec is the dual-stack golden case: the drain table has an IPv4 and an IPv6 rule of each kind.
var drainSpec = goldenCases[2].spec

func TestDrainingGolden(t *testing.T) {
	got := Draining(drainSpec).Text(DrainTableName(TableName))
	if *update {
		if err := os.WriteFile(goldenPath("draining"), []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want := readGolden(t, "draining"); got != want {
		t.Errorf("Draining(%+v).Text differs from %s:\n--- got\n%s--- want\n%s", drainSpec, goldenPath("draining"), got, want)
	}
	if Draining(Spec{LocalIPs: drainSpec.LocalIPs, DNSPort: 53, HealthPort: 8080, NoInterception: true}) != nil {
		t.Error("Draining without interception is not nil: there is nothing to keep")
	}
}
