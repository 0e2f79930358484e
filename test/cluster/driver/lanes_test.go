package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPrefixWriter: whole lines behind the prefix, a line written in pieces stays one line, and an unended one
// is written by flush.
func TestPrefixWriter(t *testing.T) {
	var out bytes.Buffer
	p := &prefixWriter{prefix: "[a] ", mu: &sync.Mutex{}, dst: &out}
	fmt.Fprint(p, "PASS a/one\nPASS a/tw")
	if got := out.String(); got != "[a] PASS a/one\n" {
		t.Errorf("after a line and a half: %q", got)
	}
	fmt.Fprint(p, "o\n     figure: x\nend")
	p.flush()
	if got, want := out.String(), "[a] PASS a/one\n[a] PASS a/two\n[a]      figure: x\n[a] end\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestRunLanes: on two lanes the first two units run at once (each waits for the other to have started), the
// third after one of them; the results come back in the units' order, and every line reaches the output whole,
// behind its unit's name.
func TestRunLanes(t *testing.T) {
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	names := []string{"nftables", "iptables", "conformance-nftables"}
	var units []unit
	for i, name := range names {
		units = append(units, unit{name, func(out io.Writer) *results {
			r := &results{mode: name, out: out}
			if i < 2 {
				started.Done()
				select {
				case <-both:
				case <-time.After(time.Minute):
					r.fail("start", fmt.Errorf("the other lane's unit never started"))
				}
			}
			for range 50 { // many lines, written in pieces, so that the lanes' writes interleave
				r.printf("     figure: %s", name)
				r.printf(" %s\n", strings.Repeat("x", 20))
			}
			r.pass("case", "")
			return r
		}})
	}
	var out bytes.Buffer
	rs := runLanes(context.Background(), units, 2, &out)
	for i, r := range rs {
		if r == nil || r.mode != names[i] || r.passed != 1 || r.failed != 0 {
			t.Errorf("result %d: %+v, want unit %s's with one pass", i, r, names[i])
		}
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3*51 {
		t.Errorf("%d lines, want %d", len(lines), 3*51)
	}
	for _, l := range lines {
		name, rest, ok := strings.Cut(strings.TrimPrefix(l, "["), "] ")
		if !ok || (rest != "     figure: "+name+" "+strings.Repeat("x", 20) && rest != "PASS "+name+"/case") {
			t.Errorf("line %q: not one whole line of one unit", l)
		}
	}
}

// TestRunLanesOne: one lane writes the units' lines as they are, one unit after the other.
func TestRunLanesOne(t *testing.T) {
	var units []unit
	for _, name := range []string{"nftables", "iptables"} {
		units = append(units, unit{name, func(out io.Writer) *results {
			r := &results{mode: name, out: out}
			r.pass("case", "")
			return r
		}})
	}
	var out bytes.Buffer
	runLanes(context.Background(), units, 1, &out)
	if got, want := out.String(), "PASS nftables/case\nPASS iptables/case\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
