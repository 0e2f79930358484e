package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/junit_nftables.xml is the report of a real run (conformance-nftables, 2026-12-02), cut to the suite's
// own entries, three unfocused specs and the focused ones; its counts are ginkgo's: 16 ran, 4 skipped by e2eSkips.
func TestSummarizeCountsTheFocusedSpecs(t *testing.T) {
	s, err := summarize(filepath.Join("testdata", "missing.log"), filepath.Join("testdata", "junit_nftables.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if s.ran != 16 || s.passed != 16 || s.failed != 0 || s.skipped != 4 || s.conformance != 8 || s.conformancePassed != 8 {
		t.Errorf("ran/passed/failed/skipped/conformance/conformancePassed = %d/%d/%d/%d/%d/%d, want 16/16/0/4/8/8",
			s.ran, s.passed, s.failed, s.skipped, s.conformance, s.conformancePassed)
	}
}

// A failed spec counts as run and failed, names itself with the first line of its failure, and a failed
// [Conformance] spec fails the conformance case.
func TestSummarizeFailure(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "junit_nftables.xml"))
	if err != nil {
		t.Fatal(err)
	}
	const spec = `name="[It] [sig-network] DNS should provide DNS for services [Conformance]" classname="Kubernetes e2e suite" status="passed"`
	if !strings.Contains(string(b), spec) {
		t.Fatalf("testdata has no %s", spec)
	}
	failed := strings.Replace(string(b), spec+` time="`, strings.Replace(spec, `"passed"`, `"failed"`, 1)+` time="`, 1)
	failed = strings.Replace(failed, `status="failed" time="`, `status="failed" time="1"><failure type="failed">[FAILED] Timed out after 600s.
second line</failure></testcase><testcase name="x" status="skipped" time="`, 1)
	p := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(p, []byte(failed), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := summarize("", p)
	if err != nil {
		t.Fatal(err)
	}
	if s.ran != 16 || s.failed != 1 || s.conformancePassed != 7 || len(s.failures) != 1 ||
		!strings.HasSuffix(s.failures[0], "for services [Conformance]: [FAILED] Timed out after 600s.") {
		t.Errorf("ran %d failed %d conformancePassed %d failures %q", s.ran, s.failed, s.conformancePassed, s.failures)
	}
	r := &results{mode: "test"}
	s.report(r)
	if r.failed != 1 || r.passed != 1 {
		t.Errorf("report: %d passed, %d failed, want the conformance case failed and the other passed", r.passed, r.failed)
	}
}

func TestSelectedRuns(t *testing.T) {
	cc := &conformanceConfig{e2e: "e", images: "i", repoList: "r", runs: "control, nftables"}
	runs, err := cc.selected()
	if err != nil || len(runs) != 2 || runs[0].name != "control" || runs[1].name != "nftables" {
		t.Errorf("selected() = %v, %v", runs, err)
	}
	cc.runs = "nftables,ipvs"
	if _, err := cc.selected(); err == nil || !strings.Contains(err.Error(), `"ipvs"`) {
		t.Errorf("unknown run: err = %v, want it named", err)
	}
	cc.runs, cc.e2e = "nftables", ""
	if _, err := cc.selected(); err == nil {
		t.Error("a run without -e2e: no error")
	}
}
