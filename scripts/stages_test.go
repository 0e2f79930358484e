package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A run of stages (scripts/test.sh, as `make test` runs it) in a tree of its own: a go test stage with a failing
// test, a stage that fails outside go test, one that skips, one in the background lane. Every stage runs, and the
// run ends with the failed test's name and output, then a verdict naming it and the failed stages.
func TestStagesEndWithTheFailures(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	root := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"test.sh", "stage.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		write("scripts/"+f, string(b))
	}
	build := exec.Command("go", "build", "-o", filepath.Join(root, "out/testsummary"), "../cmd/testsummary")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build testsummary: %v\n%s", err, out)
	}
	write("mod/go.mod", "module example.com/broken\n\ngo 1.22\n")
	write("mod/broken_test.go", `package broken

import "testing"

func TestFine(t *testing.T) {}

func TestBroken(t *testing.T) {
	t.Log("what went wrong, line 1")
	t.Error("want 2, got 3")
}
`)
	write("Makefile", `go:
	cd mod && GOFLAGS= go test -json -count=1 ./... 2>&1 | ../out/testsummary -failures "$$STAGE_FAILURES"
other:
	@echo "compiling"; echo "error: it broke"; exit 1
skipping:
	@echo "no qemu here" >>"$$STAGE_SKIP"
background:
	@echo "in the lane"
`)
	cmd := exec.Command("bash", "scripts/test.sh", filepath.Join(root, "out/stages"), "lane:background&", "go:go", "other:other", "skip:skipping")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "MAKE=make")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("the run passed with a failing test:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	last := lines[len(lines)-1]
	if last != "FAILED: TestBroken in example.com/broken; stages failed: go, other" {
		t.Errorf("last line %q:\n%s", last, out)
	}
	s := string(out)
	block := "stage go:\n--- FAIL: TestBroken in example.com/broken\n    broken_test.go:8: what went wrong, line 1\n    broken_test.go:9: want 2, got 3\n"
	if !strings.Contains(s, block) {
		t.Errorf("output lacks the failed test's block %q:\n%s", block, s)
	}
	if i, j := strings.LastIndex(s, "\nstage other failed"), strings.LastIndex(s, "error: it broke"); i < 0 || j < i {
		t.Errorf("the failed non-go stage's log tail is not in the summary:\n%s", s)
	}
	for _, want := range []string{"\nok     lane ", "\nskip   skip ", "skipped: no qemu here", "\nFAIL   go ", "1 failed (below)"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "out/stages/lane.log")); err != nil || string(b) != "in the lane\n" {
		t.Errorf("the background stage's log: %q, %v", b, err)
	}
}
