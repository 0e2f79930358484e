package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestForeignSetReplacesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, err := NewForeign(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.Set(ForeignState{DropRules: map[string]int{"ip filter/INPUT": 2, "inet fw/input": 1}, LegacyTables: []string{"ip filter"}})
	got := scrape(t, reg)
	for _, want := range []string{
		`nodelocaldns_foreign_drop_rules{chain="ip filter/INPUT"} 2`,
		`nodelocaldns_foreign_drop_rules{chain="inet fw/input"} 1`,
		`nodelocaldns_iptables_legacy_table{table="ip filter"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("scrape lacks %s:\n%s", want, got)
		}
	}
	f.Set(ForeignState{DropRules: map[string]int{"inet fw/input": 3, "ip other/out": 0}})
	got = scrape(t, reg)
	if !strings.Contains(got, `nodelocaldns_foreign_drop_rules{chain="inet fw/input"} 3`) {
		t.Errorf("scrape lacks the updated count:\n%s", got)
	}
	for _, gone := range []string{`chain="ip filter/INPUT"`, `chain="ip other/out"`, `table="ip filter"`} {
		if strings.Contains(got, gone) {
			t.Errorf("scrape still has %s after it went:\n%s", gone, got)
		}
	}
}
