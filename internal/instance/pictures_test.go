package instance

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// stateEdge is one `a --> b` line of a Mermaid state diagram (`[*]` lines left out).
var stateEdge = regexp.MustCompile(`(?m)^\s*([a-z]+) --> ([a-z]+)\s*(?::.*)?$`)

// TestPicturesDrawTheStateMachine: the state diagram in docs/pictures.md has exactly the transitions the
// state machine allows, by the states' own names.
func TestPicturesDrawTheStateMachine(t *testing.T) {
	const path = "../../docs/pictures.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i := strings.Index(page, "```mermaid\nstateDiagram-v2\n")
	if i < 0 {
		t.Fatalf("%s has no state diagram (a ```mermaid block opening with stateDiagram-v2)", path)
	}
	block := page[i+len("```mermaid\n"):]
	block = block[:strings.Index(block, "```")]
	var drawn, allowed []string
	for _, m := range stateEdge.FindAllStringSubmatch(block, -1) {
		drawn = append(drawn, m[1]+" --> "+m[2])
	}
	for from, tos := range transitions {
		for _, to := range tos {
			allowed = append(allowed, from.String()+" --> "+to.String())
		}
	}
	slices.Sort(drawn)
	slices.Sort(allowed)
	if !slices.Equal(drawn, allowed) {
		t.Errorf("%s draws the transitions\n%s\nthe state machine (state.go) allows\n%s",
			path, strings.Join(drawn, "\n"), strings.Join(allowed, "\n"))
	}
}
