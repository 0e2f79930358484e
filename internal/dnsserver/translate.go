package dnsserver

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"

	"github.com/coredns/caddy/caddyfile"
)

// rename is a directive users write (user) that caddy is handed under our plugin's name (ours), because
// upstream's plugin of the user's name is compiled in and caddy's registry takes a name once. imported says
// whether the directive may come from an imported file, where it cannot be renamed and upstream's plugin runs.
type rename struct {
	user, ours string
	word       *regexp.Regexp
	imported   bool
}

// newRename finds the directive's word on its line: the whole word, after the line's start, a blank or a brace
// (a one-line block), so that a zone or address containing it (prometheus.example.) is left alone.
func newRename(user, ours string, imported bool) rename {
	return rename{user: user, ours: ours, imported: imported,
		word: regexp.MustCompile(`(?:^|[\s{])(` + regexp.QuoteMeta(user) + `)(?:$|[\s}])`)}
}

// renames are the directives corefileForCaddy renames: prometheus always (its listener must be ours: an
// imported one is an error), forward unless CoreDNS's is asked for (pipelinedForward; an imported one stays
// CoreDNS's).
func renames() []rename {
	rs := []rename{newRename(userMetrics, metricsDirective, false)}
	if pipelinedForward() {
		rs = append(rs, newRename(userForward, forwardDirective, true))
	}
	return rs
}

// corefileForCaddy returns corefile with each renamed directive (renames) under our plugin's name, on the same
// line and otherwise unchanged, so that caddy runs our setup and its errors name the lines users wrote. A
// Corefile that does not parse is returned as it is: caddy then reports the same error. A directive that comes
// from another file (`import` of a path: its tokens name that file; the Corefile's own name none) cannot be
// renamed; for prometheus, whose upstream listener nothing bounds, that is an error.
// A Corefile that may reach a server over TLS gets the compiled-in root CAs first (installRoots).
func corefileForCaddy(corefile []byte, filename string) ([]byte, error) {
	blocks, err := caddyfile.Parse(filename, bytes.NewReader(corefile), Directives())
	if err != nil {
		return corefile, nil
	}
	if mayUseTLS(blocks) {
		installRoots()
	}
	return rewriteBlocks(corefile, filename, blocks, renames())
}

// rewrite is corefileForCaddy with the renames given, and no roots.
func rewrite(corefile []byte, filename string, rs []rename) ([]byte, error) {
	blocks, err := caddyfile.Parse(filename, bytes.NewReader(corefile), Directives())
	if err != nil {
		return corefile, nil
	}
	return rewriteBlocks(corefile, filename, blocks, rs)
}

// rewriteBlocks is rewrite on the Corefile's blocks, parsed.
func rewriteBlocks(corefile []byte, filename string, blocks []caddyfile.ServerBlock, rs []rename) ([]byte, error) {
	out := bytes.SplitAfter(slices.Clone(corefile), []byte("\n"))
	changed := false
	for _, r := range rs {
		var lines []int
		for _, b := range blocks {
			for _, t := range b.Tokens[r.user] {
				if t.Text != r.user || slices.Contains(lines, t.Line) {
					continue
				}
				if t.File != "" && t.File != filename {
					if r.imported {
						continue
					}
					return nil, fmt.Errorf("%s:%d: %s in an imported file is not supported: write it in the Corefile", t.File, t.Line, r.user)
				}
				lines = append(lines, t.Line)
			}
		}
		for _, n := range lines {
			if n < 1 || n > len(out) {
				continue
			}
			loc := r.word.FindSubmatchIndex(out[n-1])
			if loc == nil {
				continue
			}
			out[n-1] = slices.Concat(out[n-1][:loc[2]], []byte(r.ours), out[n-1][loc[3]:])
			changed = true
		}
	}
	if !changed {
		return corefile, nil
	}
	return bytes.Join(out, nil), nil
}
