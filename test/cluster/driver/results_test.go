package main

import (
	"errors"
	"strings"
	"testing"
)

// TestFailuresSayWhy: the failures said again at the end carry their reason on one line, bounded, since CI
// shows only the output's last lines.
func TestFailuresSayWhy(t *testing.T) {
	r := &results{mode: "nftables", out: &strings.Builder{}}
	r.fail("SIGKILL: ClusterIP fails open", errors.New("ClusterIP after SIGKILL: lost queries\n  12 sent → lost"))
	r.fail("long", errors.New("helm upgrade "+strings.Repeat("→", 2*maxReason)+" signal: killed"))
	if want := "nftables/SIGKILL: ClusterIP fails open: ClusterIP after SIGKILL: lost queries 12 sent → lost"; r.failures[0] != want {
		t.Errorf("failure said again as %q, want %q", r.failures[0], want)
	}
	got := []rune(r.failures[1])
	if len(got) > maxReason+len("nftables/long: ")+3 || !strings.HasPrefix(r.failures[1], "nftables/long: helm upgrade →") ||
		!strings.HasSuffix(r.failures[1], "→ signal: killed") || !strings.Contains(r.failures[1], "→ … →") {
		t.Errorf("a long reason said again as %d characters (%q), want at most %d, its start and its end, cut at characters", len(got), r.failures[1], maxReason)
	}
}
