package dnscache_test

import (
	"fmt"
	"sync"
	"testing"
)

// Every entry in these scenarios is stored at a whole second from the start and asked for at a half, or the
// other way round, so that its age is never near a whole second when the two caches compare it.
var scenarios = []scenario{{
	name:      "ageing",
	directive: "cache 30 {\n success 1024 3 0\n denial 1024 2 0\n}",
	script:    map[string]string{"a.example.": "a 10", "nx.example.": "nx 10", "nodata.example.": "nodata 1", "short.example.": "a 1"},
	steps: []step{
		{at: 0, ask: []string{"a.example. A", "nx.example. A", "nodata.example. AAAA", "short.example. A", "A.EXAMPLE. A"}},
		{at: ms(500), ask: []string{"a.example. A", "nx.example. A", "nodata.example. AAAA", "short.example. A"}},
		{at: ms(1500), ask: []string{"a.example. A", "nx.example. A", "nodata.example. AAAA", "short.example. A"}},
		{at: ms(2500), ask: []string{"a.example. A", "nx.example. A"}},
		{at: ms(3500), ask: []string{"a.example. A", "unscripted.example. A"}},
		{at: ms(4000), ask: []string{"a.example. A", "nx.example. A", "unscripted.example. A"}},
	},
}, {
	name:      "prefetch",
	directive: "cache {\n success 1024 4 0\n prefetch 2 1m 50%\n}",
	script:    map[string]string{"p.example.": "a 4", "q.example.": "a 4"},
	// A prefetch stores its entry when it runs (at a half second here), so what it stored is asked for at
	// whole seconds.
	steps: []step{
		{at: 0, ask: []string{"p.example. A", "q.example. A"}},
		{at: ms(500), ask: []string{"p.example. A"}},
		{at: ms(2500), ask: []string{"p.example. A", "q.example. A"}, settle: true},
		{at: ms(3000), ask: []string{"p.example. A"}},
		{at: ms(3500), ask: []string{"q.example. A"}, settle: true},
		{at: ms(5000), ask: []string{"p.example. A", "q.example. A"}, settle: true},
	},
}, {
	name:      "stale-immediate",
	directive: "cache {\n success 1024 2 0\n denial 1024 2 0\n serve_stale 10s immediate 30s\n}",
	script:    map[string]string{"s.example.": "a 2", "down.example.": "a 2", "nx.example.": "nx 2"},
	steps: []step{
		{at: 0, ask: []string{"s.example. A", "down.example. A", "nx.example. A"}},
		{at: ms(2500), script: map[string]string{"down.example.": "fail"},
			ask: []string{"s.example. A", "down.example. A", "nx.example. A"}, settle: true},
		{at: ms(3000), ask: []string{"s.example. A", "down.example. A", "nx.example. A"}, settle: true},
	},
}, {
	name:      "stale-verify",
	directive: "cache {\n success 1024 2 0\n serve_stale 10s verify\n}",
	script:    map[string]string{"v.example.": "a 2", "down.example.": "a 2"},
	steps: []step{
		{at: 0, ask: []string{"v.example. A", "down.example. A"}},
		{at: ms(2500), script: map[string]string{"down.example.": "fail", "v.example.": "a 3"},
			ask: []string{"v.example. A", "down.example. A"}},
		{at: ms(3000), ask: []string{"v.example. A", "down.example. A"}},
	},
}, {
	name:      "stale-verify-timeout-recheck",
	directive: "cache {\n success 1024 2 0\n serve_stale 10s verify 200ms 5s 5s\n}",
	script:    map[string]string{"down.example.": "a 2"},
	steps: []step{
		{at: 0, ask: []string{"down.example. A"}},
		{at: ms(2500), script: map[string]string{"down.example.": "fail"}, ask: []string{"down.example. A"}, settle: true},
		{at: ms(3000), ask: []string{"down.example. A"}, settle: true},
	},
}, {
	name:      "prefer-positive",
	directive: "cache {\n success 1024 2 0\n denial 1024 2 0\n serve_stale 10s\n serve_stale_policy prefer_positive\n}",
	script:    map[string]string{"pp.example.": "a 2", "plain.example.": "a 2", "lkg.example.": "a 2", "ref.example.": "a 2"},
	steps: []step{
		{at: 0, ask: []string{"pp.example. A", "plain.example. A", "lkg.example. A", "ref.example. A"}},
		{at: ms(2500), script: map[string]string{"pp.example.": "nx 2", "plain.example.": "nodata 2", "lkg.example.": "empty",
			"ref.example.": "referral 2"},
			ask: []string{"pp.example. A", "plain.example. A", "lkg.example. A", "ref.example. A"}, settle: true},
		{at: ms(3000), ask: []string{"pp.example. A", "plain.example. A", "lkg.example. A", "ref.example. A"}, settle: true},
	},
}, {
	name:      "servfail",
	directive: "cache {\n servfail 2s\n}",
	script:    map[string]string{"sf.example.": "servfail", "to.example.": "fail"},
	steps: []step{
		{at: 0, ask: []string{"sf.example. A", "to.example. A"}},
		{at: ms(500), ask: []string{"sf.example. A", "to.example. A"}},
		{at: ms(2500), script: map[string]string{"to.example.": "a 30"}, ask: []string{"sf.example. A", "to.example. A"}},
		{at: ms(3000), ask: []string{"sf.example. A", "to.example. A"}},
	},
}, {
	name:      "disable-keepttl",
	directive: "cache {\n disable success off.example.\n disable denial\n keepttl\n}",
	script:    map[string]string{"on.example.": "a 30", "x.off.example.": "a 30", "nx.example.": "nx 30"},
	steps: []step{
		{at: 0, ask: []string{"on.example. A", "x.off.example. A", "nx.example. A"}},
		{at: ms(1500), ask: []string{"on.example. A", "x.off.example. A", "nx.example. A"}},
	},
}, {
	name:      "zones",
	directive: "cache 30 inside.example.",
	script:    map[string]string{"a.inside.example.": "a 30", "outside.example.": "a 30"},
	steps: []step{
		{at: 0, ask: []string{"a.inside.example. A", "outside.example. A"}},
		{at: ms(500), ask: []string{"a.inside.example. A", "outside.example. A"}},
	},
}, {
	name:      "eviction",
	directive: "cache {\n success 1024\n}",
	script:    evictionScript(),
	steps:     []step{{at: 0, ask: evictionAsks()}},
}}

// evictionScript fills a 1024-entry cache (256 shards of 4) three times over: which entry goes is random in
// both, how many go and how many stay is not.
func evictionScript() map[string]string {
	m := map[string]string{}
	for i := range 3000 {
		m[fmt.Sprintf("n%d.example.", i)] = "a 60"
	}
	return m
}

func evictionAsks() []string {
	var qs []string
	for i := range 3000 {
		qs = append(qs, fmt.Sprintf("n%d.example. A", i))
	}
	return qs
}

// TestDifferential runs every scenario at once: they mostly sleep, and t.Parallel would run only GOMAXPROCS
// of them at a time. Each failure names its scenario.
func TestDifferential(t *testing.T) {
	var wg sync.WaitGroup
	for _, sc := range scenarios {
		wg.Go(func() { runScenario(t, sc) })
	}
	wg.Wait()
}
