package harness

import (
	"strings"
	"testing"
)

// raceOutput is what a race-built program wrote to stderr for one race (go1.2x's runtime/race), between two of
// the agent's JSON log lines.
const raceOutput = `{"level":"info","msg":"serving"}
==================
WARNING: DATA RACE
Write at 0x0000005ce4d0 by main goroutine:
  main.main()
      /tmp/racy/main.go:9 +0x30

Previous write at 0x0000005ce4d0 by goroutine 6:
  main.main.func1()
      /tmp/racy/main.go:8 +0x24

Goroutine 6 (finished) created at:
  main.main()
      /tmp/racy/main.go:8 +0x24
==================
{"level":"info","msg":"ready"}
`

func TestRaceReports(t *testing.T) {
	if got := racesIn(`{"level":"info","msg":"ready"}` + "\n"); len(got) != 0 {
		t.Errorf("a clean log gave %d reports: %q", len(got), got)
	}
	got := racesIn(raceOutput + raceOutput)
	if len(got) != 2 {
		t.Fatalf("two reports read as %d: %q", len(got), got)
	}
	for _, want := range []string{"WARNING: DATA RACE\n", "Previous write at", "main.go:8"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("report %q lacks %q", got[0], want)
		}
	}
	if strings.Contains(got[0], `"msg"`) || strings.Contains(got[0], "=====") {
		t.Errorf("report %q holds lines from outside it", got[0])
	}
	// A process killed while writing a report: what it wrote still counts.
	cut := raceOutput[:strings.Index(raceOutput, "Previous")]
	if got := racesIn(cut); len(got) != 1 || !strings.Contains(got[0], "main.go:9") {
		t.Errorf("an unfinished report read as %q", got)
	}
}
