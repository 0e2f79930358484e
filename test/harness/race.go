package harness

import (
	"os"
	"strings"
)

// RaceEnv set to 1 makes Binary build the agent with the race detector, and fails every test whose agent (or
// RunBinary's run) reported a data race. `make test-race` sets it.
const RaceEnv = "NODELOCALDNS_TEST_RACE"

func raceBuild() bool { return os.Getenv(RaceEnv) == "1" }

// The race detector (runtime/race) writes each report to stderr between two lines of '=', the first line inside
// being raceMarker, and goes on running; at exit a process that reported one exits with status 66.
const (
	raceMarker = "WARNING: DATA RACE"
	raceFence  = "=================="
)

// raceReports collects the race detector's reports from an agent's stderr, one line at a time.
type raceReports struct {
	reports []string
	open    *strings.Builder // the report being read; nil between reports
}

func (r *raceReports) line(l string) {
	switch {
	case strings.HasPrefix(l, raceMarker):
		r.open = &strings.Builder{}
		r.open.WriteString(l + "\n")
	case r.open != nil && strings.HasPrefix(l, raceFence):
		r.reports = append(r.reports, r.open.String())
		r.open = nil
	case r.open != nil:
		r.open.WriteString(l + "\n")
	}
}

// all returns every report, an unfinished one (the process was killed while writing it) included.
func (r *raceReports) all() []string {
	if r.open != nil {
		return append(r.reports, r.open.String())
	}
	return r.reports
}

// racesIn returns the race reports in a whole output.
func racesIn(out string) []string {
	var r raceReports
	for _, l := range strings.Split(out, "\n") {
		r.line(l)
	}
	return r.all()
}
