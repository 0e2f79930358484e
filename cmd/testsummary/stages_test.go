package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The closing summary of `make test` ends with the failed test's name and the first lines of its output, then a
// verdict naming it, the failed stages and the stages that did not run; a stage that failed outside go test shows
// the end of its log.
func TestStagesSummary(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var output []string
	for i := range 30 {
		output = append(output, fmt.Sprintf("    x_test.go:%d: line %d\n", i, i))
	}
	if err := appendFailures(filepath.Join(dir, "go.failures"), []failure{{pkg: "m/e2e", test: "TestBroken", output: append(append([]string{"=== RUN   TestBroken\n"}, output...), "--- FAIL: TestBroken (0.00s)\n")}}); err != nil {
		t.Fatal(err)
	}
	write("vet.status", "ok 3.5\n")
	write("go.status", "FAIL 301.2\n")
	write("go.log", "lots\nof output\n")
	write("fuzz.status", "FAIL 10\n")
	write("fuzz.log", "fuzz ./a FuzzX\n--- FAIL: FuzzX\n    found a crasher\n\n")
	write("arm64.status", "skip 0.4\n")
	write("arm64.skip", "qemu-aarch64 not found\n")
	// kernel: no status, it never ran

	var out strings.Builder
	if rc := summarizeStages(&out, dir, []string{"vet", "go", "fuzz", "arm64", "kernel"}); rc != 1 {
		t.Errorf("exit %d, want 1", rc)
	}
	s := out.String()
	for _, want := range []string{
		"ok     vet           3.5s",
		"FAIL   go          301.2s  1 failed (below)",
		"skip   arm64         0.4s  skipped: qemu-aarch64 not found",
		"-      kernel              not run",
		"stage fuzz failed; the end of " + filepath.Join(dir, "fuzz.log") + ":\n    fuzz ./a FuzzX\n    --- FAIL: FuzzX\n        found a crasher\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	wantTail := []string{
		"stage go:",
		"--- FAIL: TestBroken in m/e2e",
		"    x_test.go:0: line 0",
	}
	i := strings.Index(s, "stage go:\n")
	if i < 0 || !strings.HasPrefix(s[i:], strings.Join(wantTail, "\n")) {
		t.Errorf("the failed test's block is not as expected:\n%s", s)
	}
	if strings.Contains(s, "=== RUN") || strings.Contains(s, "(0.00s)") || !strings.Contains(s, "    x_test.go:19: line 19\n    [10 more lines in the stage's log]\n") || strings.Contains(s, "line 20") {
		t.Errorf("want the first %d lines of output without go test's framing, then a count of the rest:\n%s", failureLines, s)
	}
	if last := lines[len(lines)-1]; last != "FAILED: TestBroken in m/e2e; stages failed: go, fuzz; not run: kernel" {
		t.Errorf("last line %q", last)
	}
	// The go stage's block comes after the table and before only the fuzz stage's and the verdict.
	if strings.Index(s, "stage go:") < strings.Index(s, "not run") || strings.Index(s, "stage go:") > strings.Index(s, "stage fuzz") {
		t.Errorf("order:\n%s", s)
	}

	out.Reset()
	clean := t.TempDir()
	for _, n := range []string{"vet", "go"} {
		if err := os.WriteFile(filepath.Join(clean, n+".status"), []byte("ok 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if rc := summarizeStages(&out, clean, []string{"vet", "go"}); rc != 0 || !strings.HasSuffix(out.String(), "all stages passed\n") {
		t.Errorf("exit %d when all passed:\n%s", rc, out.String())
	}
}
