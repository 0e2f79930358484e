package nft

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// picturesPath is the page whose Mermaid pictures draw our tables; this test keeps them true to Build and
// BuildFallback. The convention, inside a ```mermaid block:
//
//	table inet <name>                          one of our tables ([IsOurTableName])
//	chain <name>                               a chain one of our tables has
//	chain <name><br/><hook> <priority>         the same, drawn at its hook and priority (a number)
//	@<name>                                    a set one of our tables has
//
// Others' hooks (conntrack, kube-proxy, IPVS) are drawn without the word "chain".
const picturesPath = "../../docs/pictures.md"

var (
	mermaidBlock = regexp.MustCompile("(?s)```mermaid\n(.*?)```")
	pictureTable = regexp.MustCompile(`\btable inet ([a-z0-9-]+)`)
	pictureChain = regexp.MustCompile(`\bchain ([a-z0-9-]+)(?:<br/>([a-z]+) (-?[0-9]+))?`)
	pictureSet   = regexp.MustCompile(`@([a-z0-9]+)`)
)

// drawnChain is a chain as a picture names it: its hook and priority when drawn with them.
type drawnChain struct {
	name, hook string
	priority   int32
	placed     bool
	line       int
}

// picturedRulesets are the tables a node has, for the representative node the pictures draw (169.254.20.10 and
// the kube-dns ClusterIP 10.96.0.10, dual-stack sets): an instance's table, a leaving instance's drain table,
// and the fallback. Returned as chain name to chain, and the set names.
func picturedRulesets() (map[string]Chain[Rule], map[string]Chain[FallbackRule], map[string]bool) {
	spec := Spec{
		LocalIPs:   []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("10.96.0.10")},
		DNSPort:    53,
		HealthPort: 8080,
		Fallbacks:  []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53")},
	}
	fb := BuildFallback(FallbackSpec{
		Targets: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::a")},
		Covered: []netip.AddrPort{netip.MustParseAddrPort("169.254.20.10:53"), netip.MustParseAddrPort("[fd00::10]:53")},
		Lease:   15 * time.Minute,
	})
	ours, fallback, sets := map[string]Chain[Rule]{}, map[string]Chain[FallbackRule]{}, map[string]bool{}
	for _, r := range []*Ruleset{Build(spec), Draining(spec)} {
		for _, c := range r.Chains {
			ours[c.Name] = c
		}
		for _, s := range r.Sets {
			sets[s.Name] = true
		}
	}
	for _, c := range fb.Chains {
		fallback[c.Name] = c
	}
	for _, s := range fb.Sets {
		sets[s.Name] = true
	}
	return ours, fallback, sets
}

// readPictures returns the Mermaid blocks of the page, each with the line its fence opens on.
func readPictures(t *testing.T) (blocks []string, lines []int) {
	t.Helper()
	b, err := os.ReadFile(picturesPath)
	if errors.Is(err, fs.ErrNotExist) && os.Getenv("NODELOCALDNS_VM") == "1" {
		// The kernel VM carries the test binaries and their testdata, not the docs: `go test ./internal/nft` on
		// the host, in the same `make test-ci`, checks the pictures.
		t.Skipf("%s is not in the kernel VM; the host's run checks it", picturesPath)
	}
	if err != nil {
		t.Fatalf("read the pictures: %v", err)
	}
	page := string(b)
	for _, m := range mermaidBlock.FindAllStringSubmatchIndex(page, -1) {
		blocks = append(blocks, page[m[2]:m[3]])
		lines = append(lines, strings.Count(page[:m[0]], "\n")+1)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no Mermaid block", picturesPath)
	}
	return blocks, lines
}

// drawnChains are the chains the pictures name, in page order, with the line each is on.
func drawnChains(blocks []string, lines []int) []drawnChain {
	var out []drawnChain
	for i, b := range blocks {
		for _, m := range pictureChain.FindAllStringSubmatchIndex(b, -1) {
			d := drawnChain{name: b[m[2]:m[3]], line: lines[i] + 1 + strings.Count(b[:m[0]], "\n")}
			if m[4] >= 0 {
				p, _ := strconv.ParseInt(b[m[6]:m[7]], 10, 32)
				d.hook, d.priority, d.placed = b[m[4]:m[5]], int32(p), true
			}
			out = append(out, d)
		}
	}
	return out
}

// checkPictures returns what the pictures draw that the code does not make, and what it makes that they leave out.
func checkPictures(blocks []string, lines []int, ours map[string]Chain[Rule], fallback map[string]Chain[FallbackRule], sets map[string]bool) []string {
	type placing struct {
		hook     Hook
		priority int32
	}
	made := map[string]placing{}
	for n, c := range ours {
		made[n] = placing{c.Hook, c.Priority}
	}
	for n, c := range fallback {
		made[n] = placing{c.Hook, c.Priority}
	}
	var problems []string
	placed := map[string]bool{}
	for _, d := range drawnChains(blocks, lines) {
		at := fmt.Sprintf("%s:%d", strings.TrimPrefix(picturesPath, "../../"), d.line)
		want, ok := made[d.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: chain %s is in no table Build or BuildFallback makes", at, d.name))
		case d.placed && (Hook(d.hook) != want.hook || d.priority != want.priority):
			problems = append(problems, fmt.Sprintf("%s: chain %s is drawn at %s %d, the code has it at %s %d",
				at, d.name, d.hook, d.priority, want.hook, want.priority))
		case d.placed:
			placed[d.name] = true
		}
	}
	for i, b := range blocks {
		for _, m := range pictureTable.FindAllStringSubmatch(b, -1) {
			if !IsOurTableName(m[1]) {
				problems = append(problems, fmt.Sprintf("picture at line %d: table inet %s is none of ours", lines[i], m[1]))
			}
		}
		for _, m := range pictureSet.FindAllStringSubmatch(b, -1) {
			if !sets[m[1]] {
				problems = append(problems, fmt.Sprintf("picture at line %d: set @%s is in none of our tables", lines[i], m[1]))
			}
		}
	}
	var missing []string
	for n, c := range made {
		if c.hook != "" && !placed[n] {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	for _, n := range missing {
		problems = append(problems, fmt.Sprintf("chain %s (%s %d) is drawn in no picture at its hook and priority",
			n, made[n].hook, made[n].priority))
	}
	return problems
}

// TestPicturesDrawOurChains: every table, chain, set, hook and priority docs/pictures.md names is one the code
// makes, and every base chain the code makes is drawn at its hook and priority somewhere.
func TestPicturesDrawOurChains(t *testing.T) {
	blocks, lines := readPictures(t)
	ours, fallback, sets := picturedRulesets()
	for _, p := range checkPictures(blocks, lines, ours, fallback, sets) {
		t.Error(p)
	}
}

// TestPicturesCheckCatchesDrift: the check above fails for the drift it is there for, a chain renamed in the
// code (the pictures then draw a chain that is gone, and leave the new one out), and a priority changed.
func TestPicturesCheckCatchesDrift(t *testing.T) {
	blocks, lines := readPictures(t)
	ours, fallback, sets := picturedRulesets()

	renamed := ours[ChainRawPrerouting]
	delete(ours, ChainRawPrerouting)
	renamed.Name = "raw-pre"
	ours[renamed.Name] = renamed
	got := strings.Join(checkPictures(blocks, lines, ours, fallback, sets), "\n")
	for _, want := range []string{"chain raw-prerouting is in no table", "chain raw-pre (prerouting -300) is drawn in no picture"} {
		if !strings.Contains(got, want) {
			t.Errorf("with raw-prerouting renamed raw-pre, the check says\n%s\nwant a line with %q", got, want)
		}
	}

	ours, fallback, sets = picturedRulesets()
	moved := fallback[ChainPodReply]
	moved.Priority = prioritySrcNAT
	fallback[ChainPodReply] = moved
	got = strings.Join(checkPictures(blocks, lines, ours, fallback, sets), "\n")
	if want := "chain pod-reply is drawn at postrouting 101, the code has it at postrouting 100"; !strings.Contains(got, want) {
		t.Errorf("with pod-reply moved to 100, the check says\n%s\nwant a line with %q", got, want)
	}
}
