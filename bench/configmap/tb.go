package main

import (
	"fmt"
	"os"
	"testing"
)

// tb lets the bench reuse test/harness, which takes a testing.TB. testing.TB cannot be implemented outside the
// testing package (it has an unexported method), so the interface is embedded (nil) and the methods the harness
// calls are provided here; a call to any other method would panic on the nil interface, loudly.
type tb struct {
	testing.TB
	cleanups []func()
	tmp      []string
}

// fatal is the panic value of Fatal/Fatalf; run recovers it.
type fatal struct{ msg string }

func (t *tb) Helper()                           {}
func (t *tb) Logf(format string, args ...any)   { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t *tb) Errorf(format string, args ...any) { t.Fatalf(format, args...) }
func (t *tb) Fatal(args ...any)                 { panic(fatal{fmt.Sprint(args...)}) }
func (t *tb) Fatalf(format string, args ...any) { panic(fatal{fmt.Sprintf(format, args...)}) }
func (t *tb) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }

func (t *tb) TempDir() string {
	d, err := os.MkdirTemp("", "bench-configmap-")
	if err != nil {
		t.Fatal(err)
	}
	t.tmp = append(t.tmp, d)
	return d
}

// done runs the cleanups in reverse order, then removes the temporary directories.
func (t *tb) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	for _, d := range t.tmp {
		os.RemoveAll(d)
	}
}
