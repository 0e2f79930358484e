package harness

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
)

// Program lets a program (a benchmark) use the harness, which takes a testing.TB. testing.TB cannot be
// implemented outside the testing package, so Program embeds a nil one and defines the methods the harness
// calls; should the harness ever call another, the nil interface panics loudly rather than misbehaving.
// Fatal unwinds to [Program.Run], which runs the cleanups as testing does.
type Program struct {
	testing.TB
	name     string
	cleanups []func()
	dirs     []string
}

// programFatal is the panic value of Fatal and Fatalf.
type programFatal struct{ msg string }

// NewProgram returns a Program named name (used in messages and temporary directory names).
func NewProgram(name string) *Program { return &Program{name: name} }

func (p *Program) Helper()                           {}
func (p *Program) Name() string                      { return p.name }
func (p *Program) Logf(format string, args ...any)   { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (p *Program) Errorf(format string, args ...any) { p.Fatalf(format, args...) }
func (p *Program) Fatal(args ...any)                 { panic(programFatal{fmt.Sprint(args...)}) }
func (p *Program) Fatalf(format string, args ...any) {
	panic(programFatal{fmt.Sprintf(format, args...)})
}
func (p *Program) Cleanup(f func()) { p.cleanups = append(p.cleanups, f) }

// TempDir returns a new temporary directory, removed when Run returns.
func (p *Program) TempDir() string {
	d, err := os.MkdirTemp("", "nodelocaldns-"+p.name+"-")
	if err != nil {
		p.Fatal(err)
	}
	p.dirs = append(p.dirs, d)
	return d
}

// Run calls fn; a Fatal inside it becomes the returned error. Then the cleanups run in reverse order (a Fatal
// in one is reported and the others still run) and the temporary directories are removed.
func (p *Program) Run(fn func() error) error {
	err := guard(fn)
	for _, f := range slices.Backward(p.cleanups) {
		if cerr := guard(func() error { f(); return nil }); cerr != nil {
			fmt.Fprintf(os.Stderr, "%s: cleanup: %v\n", p.name, cerr)
		}
	}
	p.cleanups = nil
	for _, d := range p.dirs {
		os.RemoveAll(d)
	}
	return err
}

// guard calls fn and turns a Fatal's panic into an error.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(programFatal)
			if !ok {
				panic(r)
			}
			err = errors.New(f.msg)
		}
	}()
	return fn()
}
