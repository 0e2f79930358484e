package supervisor

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
)

// TestCountPassOncePerTriggerKind: a pass that coalesced several notifications of one kind is one pass of that
// kind (the tamper e2e test found `ip link del` counted as two link passes: "link deleted" and "link down").
func TestCountPassOncePerTriggerKind(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &reconciler{m: m}
	s.countPass([]string{"link:link deleted", "link:link down"}, resultInSync, time.Now())
	s.countPass([]string{"nft:delete table inet nodelocaldns by nft[1]", "nft:overrun"}, resultRepaired, time.Now())
	s.countPass([]string{"link:address removed", "nft:flush set by nft[2]"}, resultRepaired, time.Now())

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	passes := map[string]float64{}
	var count uint64
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			switch f.GetName() {
			case "nodelocaldns_reconcile_passes_total":
				var key string
				for _, l := range mt.GetLabel() {
					key += fmt.Sprintf("%s=%s,", l.GetName(), l.GetValue())
				}
				passes[key] = mt.GetCounter().GetValue()
			case "nodelocaldns_reconcile_duration_seconds":
				count = mt.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]float64{
		"result=in_sync,trigger=link,":  1,
		"result=repaired,trigger=link,": 1,
		"result=repaired,trigger=nft,":  2,
	}
	if !maps.Equal(passes, want) {
		t.Errorf("passes by trigger: %v, want %v", passes, want)
	}
	if count != 3 {
		t.Errorf("duration histogram counted %d passes, want 3", count)
	}
}

func TestTriggerKinds(t *testing.T) {
	got := triggerKinds([]string{"nft:overrun", "link:link down", "periodic", "nft:add rule in inet nodelocaldns by nft[7]", "link:overrun"})
	if want := []string{"link", "nft", "periodic"}; !slices.Equal(got, want) {
		t.Errorf("triggerKinds: %v, want %v", got, want)
	}
}
