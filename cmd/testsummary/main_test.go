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
	if rc := run(strings.NewReader(in), &out); rc != 1 {
		t.Errorf("exit %d with a failed test, want 1", rc)
	}
	s := out.String()
	for _, want := range []string{
		"m/a TestRoot: x_test.go:9: skipping: needs root\n",
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

	out.Reset()
	if rc := run(strings.NewReader(`{"Action":"pass","Package":"m/a","Test":"TestOK"}`+"\n"+`{"Action":"pass","Package":"m/a"}`+"\n"), &out); rc != 0 {
		t.Errorf("exit %d when all passed:\n%s", rc, out.String())
	}
	out.Reset()
	build := `{"ImportPath":"m/d [m/d.test]","Action":"build-output","Output":"d.go:1: syntax error\n"}` + "\n" +
		`{"ImportPath":"m/d [m/d.test]","Action":"build-fail"}` + "\n"
	if rc := run(strings.NewReader(build), &out); rc != 1 || !strings.Contains(out.String(), "d.go:1: syntax error") {
		t.Errorf("exit %d for a build failure, want 1 and the compiler's message:\n%s", rc, out.String())
	}
	out.Reset()
	if rc := run(strings.NewReader(`{"Action":"run","Package":"m/e","Test":"TestCut"}`+"\n"), &out); rc != 1 {
		t.Errorf("exit %d for a package that never finished, want 1", rc)
	}
}
