package main

import (
	"bytes"
	"context"
	"io"
	"sync"
)

// A unit is one cluster's share of the suite: a kube-proxy mode or a conformance run. Each brings up its own
// cluster in namespaces named after its state directory (node.sh), so units may run side by side.
type unit struct {
	name string
	run  func(out io.Writer) *results
}

// runLanes runs the units on up to lanes clusters at once, each lane taking the next unit in order when its last
// one is torn down, and returns their results in the units' order. Side by side, every line a unit prints starts
// with its name in brackets ([iptables] …), whole lines at a time. A cancelled ctx starts no further unit.
//
// The suite's cases wait for what they measure (bounded) rather than count what came in a fixed time, so a second
// cluster beside them slows them down without changing a verdict; two at once on 2 cores take about the time of
// the longer lane instead of the sum (test/cluster/README.md).
func runLanes(ctx context.Context, units []unit, lanes int, stdout io.Writer) []*results {
	out := make([]*results, len(units))
	if lanes < 1 {
		lanes = 1
	}
	lanes = min(lanes, len(units))
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	for range lanes {
		wg.Go(func() {
			for i := range next {
				w := stdout
				var pw *prefixWriter
				if lanes > 1 {
					pw = &prefixWriter{prefix: "[" + units[i].name + "] ", mu: &mu, dst: stdout}
					w = pw
				}
				out[i] = units[i].run(w)
				if pw != nil {
					pw.flush()
				}
			}
		})
	}
	for i := range units {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// prefixWriter writes whole lines to dst, each behind prefix, under mu: lanes side by side never cut into each
// other's lines.
type prefixWriter struct {
	prefix string
	mu     *sync.Mutex
	dst    io.Writer
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	end := bytes.LastIndexByte(p.buf, '\n')
	if end < 0 {
		return len(b), nil
	}
	p.write(p.buf[:end+1])
	p.buf = append(p.buf[:0], p.buf[end+1:]...)
	return len(b), nil
}

// flush writes what is left of a line the unit did not end.
func (p *prefixWriter) flush() {
	if len(p.buf) > 0 {
		p.write(append(p.buf, '\n'))
		p.buf = p.buf[:0]
	}
}

func (p *prefixWriter) write(lines []byte) {
	var b bytes.Buffer
	for line := range bytes.Lines(lines) {
		b.WriteString(p.prefix)
		b.Write(line)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dst.Write(b.Bytes()) //nolint:errcheck // stdout: nowhere better to say it failed
}

// shared serialises what the units build once for all of them beside their state directories (the Helm cases'
// images, helm itself): the first unit builds, the others find it built.
var shared sync.Mutex
