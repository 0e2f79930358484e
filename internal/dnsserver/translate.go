package dnsserver

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"

	"github.com/coredns/caddy/caddyfile"
)

// corefileForCaddy returns corefile with each `prometheus` directive renamed metricsDirective, on the same line
// and otherwise unchanged, so that caddy runs our setup (prometheus.go) and its errors name the lines users
// wrote. A Corefile that does not parse is returned as it is: caddy then reports the same error. A directive
// that comes from another file (`import` of a path: its tokens name that file; the Corefile's own name none)
// cannot be renamed, and would run upstream's setup, whose listener nothing bounds: that is an error.
func corefileForCaddy(corefile []byte, filename string) ([]byte, error) {
	blocks, err := caddyfile.Parse(filename, bytes.NewReader(corefile), Directives())
	if err != nil {
		return corefile, nil
	}
	var lines []int
	for _, b := range blocks {
		for _, t := range b.Tokens[userMetrics] {
			if t.Text != userMetrics || slices.Contains(lines, t.Line) {
				continue
			}
			if t.File != "" && t.File != filename {
				return nil, fmt.Errorf("%s:%d: %s in an imported file is not supported: write it in the Corefile", t.File, t.Line, userMetrics)
			}
			lines = append(lines, t.Line)
		}
	}
	if len(lines) == 0 {
		return corefile, nil
	}
	out := bytes.SplitAfter(slices.Clone(corefile), []byte("\n"))
	for _, n := range lines {
		if n < 1 || n > len(out) {
			continue
		}
		loc := metricsWord.FindSubmatchIndex(out[n-1])
		if loc == nil {
			continue
		}
		out[n-1] = slices.Concat(out[n-1][:loc[2]], []byte(metricsDirective), out[n-1][loc[3]:])
	}
	return bytes.Join(out, nil), nil
}

// metricsWord finds the directive's word on its line: the whole word, after the line's start, a blank or a
// brace (a one-line block), so that a zone or address containing it (prometheus.example.) is left alone.
var metricsWord = regexp.MustCompile(`(?:^|[\s{])(` + userMetrics + `)(?:$|[\s}])`)
