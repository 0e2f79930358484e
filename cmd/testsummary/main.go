// Command testsummary reads `go test -json` on stdin and prints what a reader of `make test` needs: the output
// of failed and skipped tests as it happens (passing tests stay quiet, as without -v), a line as each package
// passes, then one line per package with its counts and time, and a total. It exits 1 when any test or package failed (including a build failure),
// so `go test -json ... | testsummary` fails like `go test` would.
//
// With -failures FILE it also appends each failure (test and package, the first lines of its output) to FILE, for
// the closing summary of `make test`: `testsummary -stages DIR NAME...` prints, as the last lines of the run, each
// stage's result (scripts/stage.sh records them in DIR), the failures, and the stages that did not run (stages.go).
//
// May touch: its standard streams, with the stage files under out/stages.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of test2json output (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events name the package being built here
	Test       string
	Elapsed    float64
	Output     string
}

type pkgResult struct {
	pass, fail, skip int
	result           string // ok, FAIL, skip (no test files) or "" while running
	elapsed          float64
	// output of the tests still running, by test; flushed when a test fails or skips, dropped when it passes.
	running map[string][]string
	pkgOut  []string // package-level output (build errors, panics outside a test, coverage lines)
}

func main() {
	failures := flag.String("failures", "", "append each failure to this file (empty: none)")
	skips := flag.Bool("skips", true, "print a line for each skipped test (false: only count them)")
	stages := flag.String("stages", "", "print the closing summary of the stages NAME... recorded in this directory, read no input")
	flag.Parse()
	if *stages != "" {
		os.Exit(summarizeStages(os.Stdout, *stages, flag.Args()))
	}
	var fails []failure
	rc := run(os.Stdin, os.Stdout, &fails, *skips)
	if *failures != "" && len(fails) > 0 {
		if err := appendFailures(*failures, fails); err != nil {
			fmt.Fprintf(os.Stdout, "testsummary: %v\n", err)
			rc = 1
		}
	}
	os.Exit(rc)
}

// failure is one failed test, or a package that failed outside its tests (a build error, a panic, a timeout).
type failure struct {
	pkg, test string // test is "" for the package itself
	output    []string
}

func run(in io.Reader, out io.Writer, fails *[]failure, skips bool) int {
	pkgs := map[string]*pkgResult{}
	var order []string
	get := func(name string) *pkgResult {
		p, ok := pkgs[name]
		if !ok {
			p = &pkgResult{running: map[string][]string{}}
			pkgs[name] = p
			order = append(order, name)
		}
		return p
	}
	start := time.Now()
	buildFailed := false
	buildOut := map[string][]string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		err := json.Unmarshal(sc.Bytes(), &e)
		if err == nil && e.Package == "" && e.ImportPath != "" {
			switch e.Action {
			case "build-output":
				fmt.Fprint(out, e.Output) // compiler errors, as go test prints them
				buildOut[e.ImportPath] = append(buildOut[e.ImportPath], e.Output)
			case "build-fail":
				buildFailed = true
				*fails = append(*fails, failure{pkg: e.ImportPath, output: buildOut[e.ImportPath]})
			}
			continue
		}
		if err != nil || e.Package == "" {
			fmt.Fprintln(out, sc.Text()) // not an event: pass it through
			continue
		}
		p := get(e.Package)
		switch {
		case e.Test != "" && e.Action == "output":
			p.running[e.Test] = append(p.running[e.Test], e.Output)
		case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			lines := p.running[e.Test]
			delete(p.running, e.Test)
			top := !strings.Contains(e.Test, "/")
			switch e.Action {
			case "pass":
				if top {
					p.pass++
				}
			case "fail":
				if top {
					p.fail++
					fmt.Fprintf(out, "%s %s\n%s", e.Package, e.Test, strings.Join(lines, ""))
					*fails = append(*fails, failure{pkg: e.Package, test: e.Test, output: lines})
				} else {
					// A failed subtest's output goes with its parent's, which fails too and prints it.
					parent := e.Test[:strings.LastIndex(e.Test, "/")]
					p.running[parent] = append(p.running[parent], lines...)
				}
			case "skip":
				if top {
					p.skip++
					if skips {
						fmt.Fprintf(out, "%s %s: %s", e.Package, e.Test, skipReason(lines))
					}
				}
			}
		case e.Test == "" && e.Action == "output":
			p.pkgOut = append(p.pkgOut, e.Output)
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			p.elapsed = e.Elapsed
			p.result = map[string]string{"pass": "ok", "fail": "FAIL", "skip": "skip"}[e.Action]
			if e.Action == "pass" {
				// A line as each package passes: minutes of passing packages must not look like a hang.
				fmt.Fprintf(out, "ok     %s %.1fs\n", e.Package, e.Elapsed)
			}
			if e.Action == "fail" {
				fmt.Fprintf(out, "%s FAIL\n%s", e.Package, strings.Join(p.pkgOut, ""))
				if p.fail == 0 { // no test to blame: the package's own output says why (a panic, a timeout)
					*fails = append(*fails, failure{pkg: e.Package, output: p.pkgOut})
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testsummary: reading go test -json: %v\n", err)
		return 1
	}
	// A package without a final event was cut short (killed, or go test itself failed): its running tests failed.
	for _, name := range order {
		p := pkgs[name]
		if p.result != "" {
			continue
		}
		tests := slices.Sorted(maps.Keys(p.running))
		for _, test := range tests {
			if !strings.Contains(test, "/") {
				*fails = append(*fails, failure{pkg: name, test: test, output: p.running[test]})
			}
		}
		if len(tests) == 0 {
			*fails = append(*fails, failure{pkg: name, output: p.pkgOut})
		}
	}
	if len(order) == 0 && !buildFailed {
		// go test printed no event at all: it did not start (a bad flag, no go), which must not read as a pass.
		fmt.Fprintln(out, "testsummary: no test results on the input")
		*fails = append(*fails, failure{pkg: "go test", output: []string{"no test results: go test did not run (see above)\n"}})
		return 1
	}
	rc := summarize(out, pkgs, order, time.Since(start))
	if buildFailed {
		fmt.Fprintln(out, "build failed (see above)")
		rc = 1
	}
	return rc
}

func skipReason(lines []string) string {
	for _, l := range slices.Backward(lines) {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--- SKIP") && !strings.HasPrefix(t, "=== ") {
			return t + "\n"
		}
	}
	return "skipped\n"
}

func summarize(out io.Writer, pkgs map[string]*pkgResult, order []string, wall time.Duration) int {
	slices.Sort(order)
	prefix := commonPrefix(order)
	fmt.Fprintf(out, "\n%-6s %-40s %6s %6s %6s %9s\n", "result", "package", "pass", "fail", "skip", "time")
	var pass, fail, skip, failedPkgs int
	for _, name := range order {
		p := pkgs[name]
		if p.result == "skip" && p.pass+p.fail+p.skip == 0 {
			continue // no test files
		}
		if p.result == "" {
			p.result = "FAIL" // no final event: the run was cut short
		}
		if p.result == "FAIL" {
			failedPkgs++
		}
		pass, fail, skip = pass+p.pass, fail+p.fail, skip+p.skip
		fmt.Fprintf(out, "%-6s %-40s %6d %6d %6d %8.1fs\n", p.result, strings.TrimPrefix(name, prefix), p.pass, p.fail, p.skip, p.elapsed)
	}
	fmt.Fprintf(out, "%-6s %-40s %6d %6d %6d %8.1fs\n", "total", fmt.Sprintf("%d packages, %d failed", len(order), failedPkgs), pass, fail, skip, wall.Seconds())
	if failedPkgs > 0 || fail > 0 {
		return 1
	}
	return 0
}

// commonPrefix is the module path shared by all packages ("github.com/x/y/"), so the table shows short names.
func commonPrefix(names []string) string {
	if len(names) < 2 {
		return ""
	}
	p := names[0]
	for _, n := range names[1:] {
		for !strings.HasPrefix(n, p) {
			p = p[:len(p)-1]
		}
	}
	return p[:strings.LastIndex(p, "/")+1]
}
