package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A stage of `make test` (scripts/stage.sh) leaves in the stages directory:
//
//	NAME.status    "ok|FAIL|skip SECONDS": how it ended, written when it ends (none: it did not run, or did not end)
//	NAME.log       its output
//	NAME.failures  the failures of the go test runs in it (-failures), when any
//	NAME.skip      why it skipped, when it did (scripts/optional-step.sh)
const (
	statusExt   = ".status"
	logExt      = ".log"
	failuresExt = ".failures"
	skipExt     = ".skip"
)

// failureLines is how much of a failure's output the closing summary shows; the rest is in the stage's log.
const failureLines = 20

// appendFailures appends one block per failure to path: a header naming the test and its package, then the first
// failureLines lines of its output.
func appendFailures(path string, fails []failure) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open failures file: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, fl := range fails {
		writeFailure(w, fl)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write failures file %s: %w", path, err)
	}
	return f.Close()
}

func writeFailure(w io.Writer, fl failure) {
	what := fl.test
	if what == "" {
		what = "(the package itself: build, panic or timeout)"
	}
	fmt.Fprintf(w, "--- FAIL: %s in %s\n", what, fl.pkg)
	var lines []string
	for _, l := range strings.SplitAfter(strings.Join(fl.output, ""), "\n") {
		// go test's framing says nothing the header does not (a failed subtest's "--- FAIL" is indented, and kept).
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(l, "--- FAIL: ") {
			continue
		}
		lines = append(lines, strings.TrimRight(l, "\n"))
	}
	for i, l := range lines {
		if i == failureLines {
			fmt.Fprintf(w, "    [%d more lines in the stage's log]\n", len(lines)-failureLines)
			break
		}
		fmt.Fprintln(w, l)
	}
}

type stageResult struct {
	name, result string // result: ok, FAIL, skip, or "" when it did not run
	seconds      float64
	note         string
}

// summarizeStages prints the closing summary of a run of stages, meant to be the last lines a reader sees: a line
// per stage, the failures (each failed test with the first lines of its output; for a stage without go test
// failures, the end of its log), and one verdict line naming what failed and what did not run. It returns 1
// unless every stage ran and none failed.
func summarizeStages(out io.Writer, dir string, names []string) int {
	var results []stageResult
	var failed, notRun, failedTests []string
	for _, name := range names {
		r := readStage(dir, name)
		results = append(results, r)
		switch r.result {
		case "FAIL":
			failed = append(failed, name)
			failedTests = append(failedTests, failureNames(filepath.Join(dir, name+failuresExt))...)
		case "":
			notRun = append(notRun, name)
		}
	}
	fmt.Fprintf(out, "\n== summary of the stages (logs in %s)\n", dir)
	for _, r := range results {
		switch r.result {
		case "":
			fmt.Fprintf(out, "%-6s %-8s %9s  %s\n", "-", r.name, "", "not run")
		default:
			fmt.Fprintln(out, strings.TrimRight(fmt.Sprintf("%-6s %-8s %8.1fs  %s", r.result, r.name, r.seconds, r.note), " "))
		}
	}
	for _, r := range results {
		if r.result != "FAIL" {
			continue
		}
		fmt.Fprintln(out)
		b, err := os.ReadFile(filepath.Join(dir, r.name+failuresExt))
		if err == nil && len(b) > 0 {
			fmt.Fprintf(out, "stage %s:\n%s", r.name, b)
			continue
		}
		fmt.Fprintf(out, "stage %s failed; the end of %s:\n", r.name, filepath.Join(dir, r.name+logExt))
		for _, l := range tail(filepath.Join(dir, r.name+logExt), failureLines) {
			fmt.Fprintln(out, "    "+l)
		}
	}
	verdict := "all stages passed"
	if len(failed) > 0 || len(notRun) > 0 {
		verdict = "FAILED:"
		if len(failedTests) > 0 {
			verdict += " " + strings.Join(failedTests, ", ") + ";"
		}
		if len(failed) > 0 {
			verdict += " stages failed: " + strings.Join(failed, ", ") + ";"
		}
		if len(notRun) > 0 {
			verdict += " not run: " + strings.Join(notRun, ", ") + ";"
		}
		verdict = strings.TrimSuffix(verdict, ";")
	}
	fmt.Fprintln(out, verdict)
	if len(failed) > 0 || len(notRun) > 0 {
		return 1
	}
	return 0
}

func readStage(dir, name string) stageResult {
	r := stageResult{name: name}
	b, err := os.ReadFile(filepath.Join(dir, name+statusExt))
	if err != nil {
		return r
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return r
	}
	r.result = f[0]
	r.seconds, _ = strconv.ParseFloat(f[1], 64)
	switch r.result {
	case "skip":
		if b, err := os.ReadFile(filepath.Join(dir, name+skipExt)); err == nil {
			r.note = "skipped: " + strings.Join(strings.Fields(strings.SplitN(string(b), "\n", 2)[0]), " ")
		}
	case "FAIL":
		if n := len(failureNames(filepath.Join(dir, name+failuresExt))); n > 0 {
			r.note = fmt.Sprintf("%d failed (below)", n)
		}
	}
	return r
}

// failureNames lists "TestX (package)" for each block in a failures file.
func failureNames(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "--- FAIL: "); ok {
			names = append(names, rest)
		}
	}
	return names
}

// tail returns the last n non-empty lines of a file.
func tail(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("(no log: %v)", err)}
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines[max(0, len(lines)-n):]
}
