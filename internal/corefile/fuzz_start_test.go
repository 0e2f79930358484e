package corefile

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// FuzzCorefileAtStart runs what the agent does with a base Corefile at start and on every reload: Render, then
// BoundForwards. Whatever the base, a rendered Corefile must take the bounds: the result parses into the same
// server blocks with the same directives, every directive but forward keeps its tokens, every forward keeps its
// own tokens and gains only the two options, and no forward that could take them is left without (bounding
// again changes nothing).
//
//	go test ./internal/corefile -run '^$' -fuzz FuzzCorefileAtStart -fuzztime 5m
func FuzzCorefileAtStart(f *testing.F) {
	bases, _ := filepath.Glob(filepath.Join(goldenDir, "bases", "*"))
	for _, b := range bases {
		if raw, err := os.ReadFile(b); err == nil {
			f.Add(raw)
		}
	}
	f.Add([]byte(".:53 { forward . 192.0.2.1\n}\n"))
	f.Add([]byte(".:53 {\n    forward . 192.0.2.1 # c {\n    forward a 192.0.2.2 {\n        max_concurrent 5\n    }\n}\n"))
	f.Add([]byte("(s) {\n    forward . 192.0.2.1\n}\na:53 {\n    import s\n}\n"))
	f.Fuzz(func(t *testing.T, base []byte) {
		out, err := Render(base, KubeDNS{}, testParams)
		if err != nil {
			return
		}
		bounded, n, err := BoundForwards(out, testDirectives)
		if err != nil {
			t.Fatalf("a rendered Corefile does not take the bounds: %v\n%s", err, out)
		}
		before, after := parseBlocks(t, out), parseBlocks(t, bounded)
		if len(before) != len(after) {
			t.Fatalf("%d server blocks before, %d after:\n%s", len(before), len(after), bounded)
		}
		for i := range before {
			if !slices.Equal(before[i].Keys, after[i].Keys) || len(before[i].Tokens) != len(after[i].Tokens) {
				t.Fatalf("block %d: keys %q and %d directives became %q and %d:\n%s", i, before[i].Keys,
					len(before[i].Tokens), after[i].Keys, len(after[i].Tokens), bounded)
			}
			for dir, toks := range before[i].Tokens {
				got := tokenTexts(after[i].Tokens[dir])
				if dir == "forward" {
					got = withoutBounds(got, tokenTexts(toks))
				}
				if want := tokenTexts(toks); !slices.Equal(got, want) {
					t.Fatalf("block %d, %s: tokens %q became %q:\n%s", i, dir, want, tokenTexts(after[i].Tokens[dir]), bounded)
				}
			}
		}
		again, m, err := BoundForwards(bounded, testDirectives)
		if err != nil || m != 0 || !bytes.Equal(again, bounded) {
			t.Fatalf("bounding again: %d more (%v), after %d:\n%s", m, err, n, bounded)
		}
	})
}

// withoutBounds removes from got, the tokens of a block's forward directives after BoundForwards, what it adds:
// the two options, and the braces it opened for a directive that had none (want says which had).
func withoutBounds(got, want []string) []string {
	limit := strconv.Itoa(ForwardMaxConcurrent)
	var out []string
	for i := 0; i < len(got); i++ {
		switch {
		case got[i] == optMaxConcurrent && i+1 < len(got) && got[i+1] == limit:
			i++
			continue
		case got[i] == optFailfast:
			continue
		}
		out = append(out, got[i])
	}
	// An opened block is now "{ }" right after the directive's arguments: drop the pairs want lacks.
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "{" && out[i+1] == "}" && !hasEmptyBlockAt(want, out[:i]) {
			out = append(out[:i], out[i+2:]...)
			i--
		}
	}
	return out
}

// hasEmptyBlockAt says whether want holds an empty "{ }" after the same tokens as prefix.
func hasEmptyBlockAt(want, prefix []string) bool {
	n := len(prefix)
	return n+1 < len(want) && slices.Equal(want[:n], prefix) && want[n] == "{" && want[n+1] == "}"
}
