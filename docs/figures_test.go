// Package docs_test checks the project's documentation against itself and against the code: one figure, one value.
package docs_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/connlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/corefile"
	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// The files that state figures, from this directory: the docs, and the comments and help texts of the manifests
// and make targets that repeat them.
var figureFiles = []string{"../README.md", "*.md", "../test/cluster/README.md", "../deploy/base/daemonset.yaml",
	"../deploy/chart/values.yaml", "../Makefile", "../test/cluster/cluster.mk", "../test/cluster/run.sh"}

// A figure is one named quantity stated in more than one place. Each pattern is one way the docs state it, with
// one group capturing the value; it is matched against each file's text with comment markers dropped and every
// run of white space made one space, so a figure wrapped across lines is still found. Every statement of a
// figure must give the same value, and that of the code where the figure is a constant (code). A pattern that
// matches nothing fails too: a figure reworded must be found again, not silently left out of the check.
type figure struct {
	name     string
	patterns []string
	code     string // the value in the code, or "" for a measured figure
}

var figures = []figure{
	{name: "CPU per cache hit, nodelocaldns / node-cache-like (make bench-serve)", patterns: []string{
		`cache-hit workload \(medians of 5 runs\) server QPS x untuned paired CPU paired .*? nodelocaldns \d+ [\d.]+ [\d.]+ ([\d.]+) `,
		`a cache hit costs nodelocaldns ([\d.]+)x the CPU`,
		`\(([\d.]+)x the CPU per hit`,
		`the CPU per cache hit falls to ([\d.]+)x node-cache-like's`,
	}},
	{name: "CPU per mixed query, nodelocaldns / node-cache-like", patterns: []string{
		`mixed CPU/query, nodelocaldns / node-cache-like ([\d.]+) `,
		`\*\*Mixed:\*\* ([\d.]+)x node-cache-like's CPU`,
		`\(mixed workload ([\d.]+)x`,
	}},
	{name: "CPU per miss, nodelocaldns / node-cache-like", patterns: []string{
		`misses, standard Corefile CPU/query, nodelocaldns / node-cache-like ([\d.]+) `,
		`\*\*Misses:\*\* ([\d.]+)x node-cache-like's`,
		`mixed workload [\d.]+x, a miss ([\d.]+)x\)`,
	}},
	{name: "CPU per miss, nodelocaldns / unbound", patterns: []string{
		`misses, standard Corefile CPU/query, nodelocaldns / node-cache-like [\d.]+ [\d.]+ yes nodelocaldns / unbound ([\d.]+) `,
		`unbound's figure beside it, ([\d.]+)x`,
		`unbound's CPU, a miss ([\d.]+)x`,
	}},
	{name: "peak memory under the cache-filling load, nodelocaldns / node-cache-like", patterns: []string{
		`\*\*Peak RSS under the cache-filling load:\*\* ([\d.]+)x`,
		`([\d.]+)x node-cache-like's peak memory`,
	}},
	{name: "memory worst case of the standard Corefile", patterns: []string{
		`standard Corefile needs about (\d+)Mi`,
		`caps\): about (\d+)Mi`,
		`listeners at their caps \(about (\d+)Mi`,
	}},
	{name: "memory worst case with serve_stale prefer_positive", patterns: []string{
		"`serve_stale_policy prefer_positive` about (\\d+)Mi",
		`worst case \(about (\d+)Mi with the standard capacities`,
	}},
	{name: "memory limit of the manifests", patterns: []string{
		`limits: memory: (\d+)Mi`,
		`The manifests set a (\d+)Mi limit`,
	}},
	{name: "TCP connections per source on the DNS listeners", code: fmt.Sprint(connlimit.DefaultPerSource), patterns: []string{
		`(\d+) per source(?: address)? and \d+ in all`,
	}},
	{name: "TCP connections in all on the DNS listeners", code: fmt.Sprint(connlimit.DefaultTotal), patterns: []string{
		`\d+ per source(?: address)? and (\d+) in all`,
	}},
	{name: "misses in flight per forward", code: fmt.Sprint(corefile.ForwardMaxConcurrent), patterns: []string{
		"`max_concurrent (\\d+)`",
		`adds max_concurrent (\d+)`,
		"`fairshare (\\d+)`",
		`bounded \((\d+) in flight per block\)`,
	}},
	{name: "another pod's misses REFUSED under one shared bound", patterns: []string{
		`one shared bound REFUSED (\S+) of another pod's 30`,
		`(\S+) of another pod's 30 misses were REFUSED`,
	}},
	{name: "connections per source on the health port", code: fmt.Sprint(listenlimit.Health().PerSource), patterns: []string{
		`(\d+) connections on the health port`,
	}},
	{name: "connections per source on each metrics port", code: fmt.Sprint(listenlimit.AgentMetrics().PerSource), patterns: []string{
		`connections on the health port, (\d+) on each metrics port`,
	}},
	{name: "liveness: worst case from a stop to the kill", patterns: []string{
		`\*\*(\d+) s at most\*\*`,
		`\[(\d+) s at most\]`,
		`Worst case (\d+) s from the stop to the kill`,
	}},
	{name: "liveness: a reconcile or reload pass that fails /health, seconds", patterns: []string{
		`reconcile or reload pass has run over (\d+) s`,
		`\(a pass over (\d+) s\)`,
		`reconcile pass or reload has run for over (\d+) s`,
	}},
	{name: "liveness: the DNS answer /health waits for, ms", patterns: []string{
		`\*\*TCP\*\* \(its own accept queue, unlike a flooded UDP one\) within (\d+) ms`,
		`no TCP answer within (\d+) ms`,
	}},
	{name: "the link-local fallback's default lease, minutes", code: fmt.Sprint(options.DefaultFallbackLease.Minutes()), patterns: []string{
		`left it for (\d+) minutes`,
		"`-fallback-lease` \\| `(\\d+)m`",
		`lease \((\d+) min\)`,
		"`-fallback-lease` \\((\\d+) min;",
		"`-fallback-lease`, (\\d+) minutes\\)",
		"`linkLocalFallback.lease`, (\\d+) minutes\\)",
		"`\"\"` \\((\\d+)m\\)",
		`the agent's (\d+)m, a Go duration`,
		`the shipped default is (\d+) minutes`,
	}},
	{name: "nodes of the test-cluster Kubernetes", code: "two", patterns: []string{
		`real (\S+)-node Kubernetes`,
		`the (\S+)-node cluster`,
	}},
}

// TestFiguresAgree: every statement of a figure in the docs gives one value, the code's where it has one.
func TestFiguresAgree(t *testing.T) {
	texts := figureTexts(t)
	for _, f := range figures {
		byValue := map[string][]string{} // value: where it is stated
		for _, p := range f.patterns {
			re := regexp.MustCompile(p)
			found := 0
			for _, ft := range texts {
				for _, m := range re.FindAllStringSubmatch(ft.text, -1) {
					v := strings.TrimSuffix(m[1], ",")
					byValue[v] = append(byValue[v], fmt.Sprintf("%s: %q", ft.name, m[0]))
					found++
				}
			}
			if found == 0 {
				t.Errorf("%s: no file states it as %q: reworded? give the pattern that finds it now", f.name, p)
			}
		}
		if f.code != "" && len(byValue[f.code]) == 0 {
			byValue[f.code] = nil
		}
		if len(byValue) > 1 || (f.code != "" && len(byValue) == 1 && byValue[f.code] == nil) {
			var b strings.Builder
			for _, v := range slices.Sorted(maps.Keys(byValue)) {
				where := byValue[v]
				if v == f.code {
					fmt.Fprintf(&b, "\n  %s (the code)", v)
				}
				for _, w := range where {
					fmt.Fprintf(&b, "\n  %s in %s", v, w)
				}
			}
			t.Errorf("%s: stated with %d values:%s", f.name, len(byValue), b.String())
		}
	}
}

type figureText struct{ name, text string }

var (
	commentMark = regexp.MustCompile(`(?m)^\s*#+ ?`)
	whiteSpace  = regexp.MustCompile(`\s+`)
)

func figureTexts(t *testing.T) []figureText {
	var out []figureText
	for _, g := range figureFiles {
		paths, err := filepath.Glob(g)
		if err != nil || len(paths) == 0 {
			t.Fatalf("%s: no file (%v)", g, err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			if !strings.HasSuffix(p, ".md") { // comments of YAML, make and shell: their text without the markers
				text = commentMark.ReplaceAllString(text, "")
			}
			out = append(out, figureText{name: strings.TrimPrefix(p, "../"), text: whiteSpace.ReplaceAllString(text, " ")})
		}
	}
	return out
}
