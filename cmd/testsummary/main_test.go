package main

import (
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	const in = `{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"quiet\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0.1}
{"Action":"output","Package":"m/a","Test":"TestRoot","Output":"    x_test.go:9: skipping: needs root\n"}
{"Action":"output","Package":"m/a","Test":"TestRoot","Output":"--- SKIP: TestRoot (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestRoot"}
{"Action":"pass","Package":"m/a","Elapsed":1.5}
{"Action":"output","Package":"m/b","Test":"TestBad/sub","Output":"    b_test.go:3: got 1, want 2\n"}
{"Action":"fail","Package":"m/b","Test":"TestBad/sub"}
{"Action":"output","Package":"m/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestBad"}
{"Action":"fail","Package":"m/b","Elapsed":2}
{"Action":"skip","Package":"m/c"}
`
	var out strings.Builder
	var fails []failure
	if rc := run(strings.NewReader(in), &out, &fails, true); rc != 1 {
		t.Errorf("exit %d with a failed test, want 1", rc)
	}
	s := out.String()
	for _, want := range []string{
		"m/a TestRoot: x_test.go:9: skipping: needs root\n",
		"ok     m/a 1.5s\n", // as it passes
		// The failed subtest's own output, where the reason is, comes with its parent's.
		"m/b TestBad\n    b_test.go:3: got 1, want 2\n--- FAIL: TestBad (0.00s)\n",
		"ok     a ", "FAIL   b ",
		"total  3 packages, 1 failed",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "quiet") || strings.Contains(s, " c ") {
		t.Errorf("passing output or a package without tests shown:\n%s", s)
	}
	// The failed test, for the closing summary; its package failing because of it adds nothing.
	if len(fails) != 1 || fails[0].pkg != "m/b" || fails[0].test != "TestBad" || !strings.Contains(strings.Join(fails[0].output, ""), "got 1, want 2") {
		t.Errorf("failures recorded: %+v, want TestBad of m/b with its subtest's output", fails)
	}

	out.Reset()
	fails = nil
	if rc := run(strings.NewReader(`{"Action":"pass","Package":"m/a","Test":"TestOK"}`+"\n"+`{"Action":"pass","Package":"m/a"}`+"\n"), &out, &fails, true); rc != 0 || len(fails) != 0 {
		t.Errorf("exit %d, failures %+v when all passed:\n%s", rc, fails, out.String())
	}
	out.Reset()
	build := `{"ImportPath":"m/d [m/d.test]","Action":"build-output","Output":"d.go:1: syntax error\n"}` + "\n" +
		`{"ImportPath":"m/d [m/d.test]","Action":"build-fail"}` + "\n"
	if rc := run(strings.NewReader(build), &out, &fails, true); rc != 1 || !strings.Contains(out.String(), "d.go:1: syntax error") {
		t.Errorf("exit %d for a build failure, want 1 and the compiler's message:\n%s", rc, out.String())
	}
	if len(fails) != 1 || fails[0].pkg != "m/d [m/d.test]" || fails[0].test != "" || !strings.Contains(strings.Join(fails[0].output, ""), "syntax error") {
		t.Errorf("build failure recorded as %+v", fails)
	}
	out.Reset()
	fails = nil
	cut := `{"Action":"run","Package":"m/e","Test":"TestCut"}` + "\n" + `{"Action":"output","Package":"m/e","Test":"TestCut","Output":"stuck here\n"}` + "\n"
	if rc := run(strings.NewReader(cut), &out, &fails, true); rc != 1 {
		t.Errorf("exit %d for a package that never finished, want 1", rc)
	}
	if len(fails) != 1 || fails[0].test != "TestCut" || fails[0].output[0] != "stuck here\n" {
		t.Errorf("the test running when the package was cut short recorded as %+v", fails)
	}
	out.Reset()
	fails = nil
	if rc := run(strings.NewReader("go: unknown flag -bad\n"), &out, &fails, true); rc != 1 || len(fails) != 1 || !strings.Contains(out.String(), "go: unknown flag -bad") {
		t.Errorf("exit %d, failures %+v when go test printed no event, want 1:\n%s", rc, fails, out.String())
	}
	out.Reset()
	fails = nil
	panicked := `{"Action":"output","Package":"m/f","Output":"panic: test timed out after 1m0s\n"}` + "\n" + `{"Action":"fail","Package":"m/f","Elapsed":60}` + "\n"
	if rc := run(strings.NewReader(panicked), &out, &fails, true); rc != 1 || len(fails) != 1 || fails[0].pkg != "m/f" || fails[0].output[0] != "panic: test timed out after 1m0s\n" {
		t.Errorf("exit %d, failures %+v for a package that failed outside its tests", rc, fails)
	}
}
