package main

import (
	"fmt"
	"os"
	"slices"
	"testing"
)

// tb is the part of testing.TB the harness uses, for a program. testing.TB cannot be implemented outside the
// testing package, so tb embeds a nil one: a harness call to any method not defined here would panic, which
// is how we would learn that the harness grew a new need.
type tb struct {
	testing.TB
	cleanups []func()
	dirs     []string
}

// errFatal unwinds a failed bench to main, which runs the cleanups and exits 1.
type errFatal struct{ msg string }

func (t *tb) Helper()                         {}
func (t *tb) Name() string                    { return "bench/reconcile" }
func (t *tb) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t *tb) Fatal(args ...any)               { panic(errFatal{fmt.Sprint(args...)}) }
func (t *tb) Fatalf(format string, args ...any) {
	panic(errFatal{fmt.Sprintf(format, args...)})
}
func (t *tb) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *tb) TempDir() string {
	d, err := os.MkdirTemp("", "bench-reconcile-")
	if err != nil {
		t.Fatal(err)
	}
	t.dirs = append(t.dirs, d)
	return d
}

// close runs the cleanups in reverse order, as testing does, then removes the temp dirs.
func (t *tb) close() {
	for _, f := range slices.Backward(t.cleanups) {
		t.runCleanup(f)
	}
	for _, d := range t.dirs {
		os.RemoveAll(d)
	}
}

// runCleanup runs f, reporting rather than propagating a Fatal inside it, so the other cleanups still run.
func (t *tb) runCleanup(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(errFatal); ok {
				fmt.Fprintf(os.Stderr, "bench/reconcile: cleanup: %s\n", e.msg)
				return
			}
			panic(r)
		}
	}()
	f()
}
