package corefile

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/coredns/caddy/caddyfile"
)

// ForwardMaxConcurrent is the max_concurrent given to a forward that sets no bound of its own, and the LIMIT of
// the fairshare directive written beside it. Each query in flight towards an upstream holds a goroutine, a
// connection and its buffers (about 10 KiB together under a flood); CoreDNS's forward documents about 2 KiB for
// the query alone. 250 keeps a forward's worst case near 2.5 MiB while still carrying 5k queries a second at an
// upstream latency of 50 ms (500 a second at 500 ms, shared fairly between the clients asking: fairshare).
const ForwardMaxConcurrent = 250

// fairshareDirective is internal/fairshare's directive: the bound shared fairly between clients.
const fairshareDirective = "fairshare"

// The forward options BoundForwards adds, and the ones that mean a forward is already bounded by its author.
const (
	optMaxConcurrent = "max_concurrent"
	optFailfast      = "failfast_all_unhealthy_upstreams"
)

// BoundForwards gives every `forward` directive of corefile that sets neither max_concurrent nor
// failfast_all_unhealthy_upstreams both of them, and returns the result with the number of directives changed.
// A server block where it bounds a forward also gets `fairshare ForwardMaxConcurrent` on the line before the
// first such forward (unless it has a fairshare already, or the forward does not begin its line), so that the
// bound is shared fairly between the clients asking instead of going to whoever floods (internal/fairshare).
// A directive list without fairshare (a build without it) gets no fairshare line. The block's forwards share
// that one limit: a block with several is rare (each zone has its own in
// node-cache's Corefile), and one fair bound of 250 is what a single forward would have.
//
// Why: without them an upstream that stops answering under load takes memory without bound. Every miss waits
// for forward's 5 s timeout, so 10k misses a second hold 50k goroutines and connections (measured: 30 MiB to
// 370 MiB in 4 s, nothing answered). max_concurrent sheds what is over the bound at once with REFUSED (forward's
// own choice: not cached by `cache`, and a client with a second nameserver moves on immediately), and once
// forward's health check has marked every upstream down, failfast_all_unhealthy_upstreams answers SERVFAIL at
// once instead of trying a dead upstream anyway; `cache` answers what it holds in front of both. A forward that
// sets either option is its author's choice and is left alone (`max_concurrent 0` restores an unbounded one).
//
// Only lines change: an option block gets two lines after its opening line, and a directive without one gets
// " {" on its line (before any comment) followed by the two options and "}". A directive from an imported file,
// or whose line holds a quote, is left as it is. The result parses as corefile did.
func BoundForwards(corefile []byte, directives []string) ([]byte, int, error) {
	blocks, err := caddyfile.Parse(corefileName, bytes.NewReader(corefile), directives)
	if err != nil {
		return nil, 0, err
	}
	lines := strings.Split(string(corefile), "\n")
	onLine := lineTokens(corefile)
	edits := map[int]edit{} // line (1-based) -> what to do there
	for _, b := range blocks {
		fair := slices.Contains(directives, fairshareDirective) && len(b.Tokens[fairshareDirective]) == 0
		for _, d := range splitDirectives(b.Tokens["forward"]) {
			if line, hasBlock, ok := boundable(d, lines, onLine); ok {
				e := edit{hasBlock: hasBlock, fair: fair && onLine[line][0] == "forward"}
				fair = fair && !e.fair
				e.fair = e.fair || edits[line].fair // a snippet's line, seen from several blocks
				edits[line] = e
			}
		}
	}
	order := make([]int, 0, len(edits))
	for l := range edits {
		order = append(order, l)
	}
	// From the end, so that the lines still to edit keep their numbers.
	slices.Sort(order)
	slices.Reverse(order)
	for _, l := range order {
		next := ""
		if l < len(lines) {
			next = lines[l]
		}
		lines = slices.Replace(lines, l-1, l, boundLine(lines[l-1], next, edits[l])...)
	}
	out := []byte(strings.Join(lines, "\n"))
	if _, err := caddyfile.Parse(corefileName, bytes.NewReader(out), directives); err != nil {
		return nil, 0, fmt.Errorf("bound forward: the edited corefile does not parse: %w", err)
	}
	return out, len(edits), nil
}

// edit is what BoundForwards does to a forward's line.
type edit struct {
	hasBlock bool // the directive opens an option block on its line
	fair     bool // a fairshare line goes before it
}

// splitDirectives cuts the tokens of every occurrence of one directive in a server block apart: each starts with
// the directive's name outside any nested block, on a line of its own or after the previous one's block (its
// arguments are on its line, so `forward forward` is one directive).
func splitDirectives(toks []caddyfile.Token) [][]caddyfile.Token {
	var out [][]caddyfile.Token
	depth, prevLine, closed := 0, 0, false
	for i, t := range toks {
		if depth == 0 && t.Text == "forward" && (i == 0 || t.Line != prevLine || closed) {
			out = append(out, nil)
		}
		prevLine, closed = t.Line, depth == 1 && t.Text == "}"
		if len(out) == 0 {
			continue
		}
		switch t.Text {
		case "{":
			depth++
		case "}":
			depth--
		}
		out[len(out)-1] = append(out[len(out)-1], t)
	}
	return out
}

// boundable says whether the directive d needs the options and can take them: the line to edit, and whether
// the directive opens an option block there. Tokens of the Corefile itself have no File; imported ones do.
// A directive without a block gets one at the end of its line, so it must end its line: `(s) { forward } b {`
// is left alone.
func boundable(d []caddyfile.Token, lines []string, onLine map[int][]string) (line int, hasBlock, ok bool) {
	first := d[0]
	if first.File != "" || first.Line < 1 || first.Line > len(lines) {
		return 0, false, false
	}
	for i, t := range d {
		if t.Text == "{" && i > 0 && t.Line == first.Line {
			hasBlock = true
		}
		if t.Text == optMaxConcurrent || t.Text == optFailfast {
			return 0, false, false
		}
		if hasBlock && t.Text == "}" && t.Line == first.Line {
			return 0, false, false // a one-line block: nowhere to put a line
		}
	}
	if strings.Contains(lines[first.Line-1], `"`) {
		return 0, false, false
	}
	if raw := onLine[first.Line]; !hasBlock && (len(raw) < len(d) || !slices.Equal(raw[len(raw)-len(d):], tokenTexts(d))) {
		return 0, false, false
	}
	return first.Line, hasBlock, true
}

// lineTokens lexes corefile (no imports followed) into the texts of the tokens of each line.
func lineTokens(corefile []byte) map[int][]string {
	out := map[int][]string{}
	d := caddyfile.NewDispenser(corefileName, bytes.NewReader(corefile))
	for d.Next() {
		out[d.Line()] = append(out[d.Line()], d.Val())
	}
	return out
}

func tokenTexts(toks []caddyfile.Token) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = t.Text
	}
	return out
}

// boundLine returns what replaces line: the line and the options after it, in a block opened for them if the
// directive had none, after a fairshare line if e says so. The options take the indentation of the block's next
// line when it is deeper.
func boundLine(line, next string, e edit) []string {
	indent := leadingSpace(line)
	if e.fair {
		fair := indent + fairshareDirective + " " + strconv.Itoa(ForwardMaxConcurrent)
		return append([]string{fair}, boundLine(line, next, edit{hasBlock: e.hasBlock})...)
	}
	hasBlock := e.hasBlock
	inner := indent + "    "
	if n := leadingSpace(next); hasBlock && len(n) > len(indent) && strings.TrimSpace(next) != "}" {
		inner = n
	}
	opts := []string{
		inner + optMaxConcurrent + " " + strconv.Itoa(ForwardMaxConcurrent),
		inner + optFailfast,
	}
	if hasBlock {
		return append([]string{line}, opts...)
	}
	code, comment := line, ""
	if i := commentStart(line); i >= 0 {
		code, comment = line[:i], " "+line[i:]
	}
	open := strings.TrimRightFunc(code, unicode.IsSpace) + " {" + comment
	return append(append([]string{open}, opts...), indent+"}")
}

// commentStart is where the comment of an unquoted line starts, -1 without one. The lexer starts a comment at a
// '#' that begins a token; a '#' inside a token only drops the rest of that token.
func commentStart(line string) int {
	prevSpace := true
	for i, r := range line {
		if r == '#' && prevSpace {
			return i
		}
		prevSpace = unicode.IsSpace(r)
	}
	return -1
}

func leadingSpace(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }
