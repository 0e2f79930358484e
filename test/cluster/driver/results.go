package main

import (
	"fmt"
	"strings"
)

// results counts the cases of one mode (or all of them) and keeps the figures for the closing table.
type results struct {
	mode           string
	passed, failed int
	skipped        int
	figures        []string
}

func (r *results) pass(name, detail string) {
	r.passed++
	if detail != "" {
		detail = " (" + detail + ")"
	}
	fmt.Printf("PASS %s/%s%s\n", r.mode, name, detail)
}

func (r *results) fail(name string, err error) {
	r.failed++
	fmt.Printf("FAIL %s/%s: %s\n", r.mode, name, strings.ReplaceAll(err.Error(), "\n", "\n     "))
}

// skip records a case that was not run, and why.
func (r *results) skip(name, why string) {
	r.skipped++
	fmt.Printf("SKIP %s/%s: skipped: %s\n", r.mode, name, why)
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
	fmt.Printf("     figure: %s: %s\n", name, fmt.Sprintf(format, args...))
}

func (r *results) merge(o *results) {
	r.passed += o.passed
	r.failed += o.failed
	r.skipped += o.skipped
	r.figures = append(r.figures, o.figures...)
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
