package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// results counts the cases of one mode (or all of them) and keeps the figures for the closing table. Its lines go
// to out (stdout when nil; its lane's writer when clusters run side by side, lanes.go).
type results struct {
	mode           string
	passed, failed int
	skipped        int
	figures        []string
	failures       []string // the failed cases' names and why, said again at the end
	out            io.Writer
}

// printf writes one of the mode's lines where its output goes.
func (r *results) printf(format string, args ...any) { fprintf(r.out, format, args...) }

// fprintf writes to w, stdout when w is nil.
func fprintf(w io.Writer, format string, args ...any) {
	if w == nil {
		w = os.Stdout
	}
	fmt.Fprintf(w, format, args...)
}

func (r *results) pass(name, detail string) {
	r.passed++
	if detail != "" {
		detail = " (" + detail + ")"
	}
	r.printf("PASS %s/%s%s\n", r.mode, name, detail)
}

func (r *results) fail(name string, err error) {
	r.failed++
	r.failures = append(r.failures, r.mode+"/"+name+": "+shortReason(err))
	r.printf("FAIL %s/%s: %s\n", r.mode, name, strings.ReplaceAll(err.Error(), "\n", "\n     "))
}

// maxReason bounds a failure's reason as the end of the output says it again: CI shows only the output's last
// lines, and a failure with no reason there can only be guessed at.
const maxReason = 600

// shortReason is err on one line, at most maxReason characters: a longer one keeps its start and its end (a
// command's line comes first, and why it failed last).
func shortReason(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if r := []rune(s); len(r) > maxReason {
		s = string(r[:maxReason/2]) + " … " + string(r[len(r)-maxReason/2:])
	}
	return s
}

// skip records a case that was not run, and why.
func (r *results) skip(name, why string) {
	r.skipped++
	r.printf("SKIP %s/%s: skipped: %s\n", r.mode, name, why)
}

// check records a case from its error.
func (r *results) check(name string, detail string, err error) bool {
	if err != nil {
		r.fail(name, err)
		return false
	}
	r.pass(name, detail)
	return true
}

// figure records a measured value, printed as it is taken and again at the end.
func (r *results) figure(name, format string, args ...any) {
	line := fmt.Sprintf("%-10s %-72s %s", r.mode, name, fmt.Sprintf(format, args...))
	r.figures = append(r.figures, line)
	r.printf("     figure: %s: %s\n", name, fmt.Sprintf(format, args...))
}

func (r *results) merge(o *results) {
	r.passed += o.passed
	r.failed += o.failed
	r.skipped += o.skipped
	r.figures = append(r.figures, o.figures...)
	r.failures = append(r.failures, o.failures...)
}

func (r *results) printFigures() {
	if len(r.figures) == 0 {
		return
	}
	fmt.Println("== figures")
	for _, f := range r.figures {
		fmt.Println(f)
	}
}

// printFailures says the failed cases again, where the output ends: with clusters side by side, a failure's
// lines are among another cluster's.
func (r *results) printFailures(w io.Writer) {
	if len(r.failures) == 0 {
		return
	}
	fmt.Fprintln(w, "== failed (their FAIL lines above say why in full)")
	for _, f := range r.failures {
		fmt.Fprintln(w, "FAIL "+f)
	}
}

// total is the closing count.
func (r *results) total() string {
	if r.skipped > 0 {
		return fmt.Sprintf("cluster: %d passed, %d failed, %d skipped", r.passed, r.failed, r.skipped)
	}
	return fmt.Sprintf("cluster: %d passed, %d failed", r.passed, r.failed)
}

// writeSummary writes the failures said again and the closing count to path, for what runs the suite to say
// again after its own output (.ci/run, whose record keeps only its last lines).
func (r *results) writeSummary(path string) error {
	var b strings.Builder
	r.printFailures(&b)
	b.WriteString(r.total() + "\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
