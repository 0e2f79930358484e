package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Markdown files whose relative links must resolve, from this directory.
var linkFiles = []string{"../README.md", "*.md", "../test/cluster/README.md"}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading   = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	fence     = regexp.MustCompile("(?ms)^```.*?^```")
	slugStrip = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// anchors are GitHub's anchors for the headings of a Markdown text: lower case, punctuation but hyphens and
// underscores dropped, each space a hyphen; a repeated heading gets -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := strings.ReplaceAll(slugStrip.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestLinksResolve: every relative link of the docs names a file that exists, and every #anchor one of its
// headings (a doc cut or a heading renamed must not strand the links into it).
func TestLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := cache[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cache[path] = anchors(string(b))
		return cache[path]
	}
	checked := 0
	for _, g := range linkFiles {
		paths, _ := filepath.Glob(g)
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(link, "#")
				target := p
				if file != "" {
					target = filepath.Join(filepath.Dir(p), file)
				}
				checked++
				st, err := os.Stat(target)
				if err != nil {
					t.Errorf("%s: link %q: %v", p, link, err)
					continue
				}
				if anchor != "" && !st.IsDir() && strings.HasSuffix(target, ".md") && !anchorsOf(target)[anchor] {
					t.Errorf("%s: link %q: %s has no heading with anchor #%s", p, link, target, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked: is the link pattern still right?", checked)
	}
}
