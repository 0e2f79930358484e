package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const (
	tunedName   = "nodelocaldns"
	fastOffName = "fast path off"
	untunedName = "node-cache-like"
	unboundName = "unbound"
	compareName = "compared binary"
	warmQPS     = 20000 // warm-up rate, below every server's capacity
)

// variants are the nodelocaldns configurations measured: the default, the default without the fast path,
// node-cache's way of running the same engine, and (with -variants) the default with one knob changed, so the
// table shows what each buys. only, when not empty, keeps the named ones.
func variants(withKnobs, withForward bool, compare string, only map[string]bool) []variant {
	vs := []variant{
		{name: tunedName, mixed: true, miss: true, hint: "the defaults: fast path on (internal/fastpath), default tuning (cmd/nodelocaldns/tuning.go)"},
		{name: fastOffName, mixed: true, miss: true, env: []string{"NODELOCALDNS_FASTPATH=off"}, hint: "NODELOCALDNS_FASTPATH=off: CoreDNS answers every query, default tuning"},
		{name: untunedName, mixed: true, miss: true, tags: "corednscache", env: []string{"NODELOCALDNS_TUNING=off", "NODELOCALDNS_FASTPATH=off"},
			hint: "built with -tags corednscache (CoreDNS's cache plugin, as node-cache links it, not ours), NODELOCALDNS_TUNING=off: Go runtime defaults, as node-cache runs CoreDNS"},
	}
	vs = append(vs, resilientVariants(vs)...)
	if compare != "" {
		vs = append(vs, variant{name: compareName, mixed: true, miss: true, bin: compare, hint: compare + ", the defaults"})
	}
	if withKnobs {
		vs = append(vs, knobVariants()...)
	}
	if withForward {
		vs = append(vs, forwardVariants()...)
	}
	if len(only) > 0 {
		vs = slices.DeleteFunc(vs, func(v variant) bool { return !only[v.name] })
	}
	return vs
}

// recoverFatal turns the harness's Fatal (through tb) into the function's error.
func recoverFatal(err *error) {
	r := recover()
	if f, ok := r.(fatal); ok {
		*err = fmt.Errorf("%s", f.msg)
	} else if r != nil {
		panic(r)
	}
}

// buildBinary builds cmd/nodelocaldns with the given -pgo setting ("auto" applies default.pgo) and -tags.
func buildBinary(work, name, pgo, tags string) (string, error) {
	out := filepath.Join(work, name)
	if pgo == "" {
		pgo = "auto"
	}
	cmd := exec.Command("go", "build", "-pgo="+pgo, "-tags="+tags, "-o", out, "github.com/nodelocaldns/nodelocaldns/cmd/nodelocaldns")
	// Static, as the harness builds the default one (test/harness.Binary) and the Makefile every build: a cgo
	// build maps libc and starts differently, which showed as 8 MiB more idle RSS in a run started outside make.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -pgo=%s -tags=%s: %v\n%s", pgo, tags, err, b)
	}
	return out, nil
}

// buildKey names a variant's build: its -pgo and -tags.
func (v variant) buildKey() string { return v.pgo + "|" + v.tags }

func bench(p params) (err error) {
	defer recoverFatal(&err)
	if err := checkTools(); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// Build before pinning this process to one CPU.
	bins := map[string]string{"|": harness.Binary(tb{})}
	for i, v := range variants(p.variants, p.forward, p.compare, p.only) {
		if _, ok := bins[v.buildKey()]; !ok && v.bin == "" {
			if bins[v.buildKey()], err = buildBinary(work, fmt.Sprintf("nodelocaldns-%d", i), v.pgo, v.tags); err != nil {
				return err
			}
		}
	}
	var logTo io.Writer = io.Discard
	if p.verbose {
		logTo = os.Stderr
	}

	up, err := startLoadSide(p.names)
	if err != nil {
		return err
	}
	defer up.stop()

	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	hints := map[string]string{}
	for i, v := range variants(p.variants, p.forward, p.compare, p.only) {
		bin := bins[v.buildKey()]
		if v.bin != "" {
			bin = v.bin
		}
		s, err := startNodeLocalDNS(bin, work, v, i, logTo)
		if s != nil {
			servers = append(servers, s)
		}
		if err != nil {
			return err
		}
		hints[v.name] = v.hint
	}
	for _, resilient := range []bool{false, true} {
		name := unboundName
		if resilient {
			name += resilientSuffix
		}
		if len(p.only) > 0 && !p.only[name] {
			continue
		}
		ub, err := startUnbound(work, len(servers), logTo, resilient)
		if ub != nil {
			servers = append(servers, ub)
		}
		if err != nil {
			return err
		}
	}
	if len(p.only) == 0 || p.only[responderName] {
		r, err := startResponder(len(servers), logTo)
		if r != nil {
			servers = append(servers, r)
		}
		if err != nil {
			return err
		}
		hints[responderName] = responderHint
	}
	hints[unboundName] = "unbound " + "1 thread, forwarding cache, same TTL caps"
	hints[unboundName+resilientSuffix] = hints[unboundName] + ", prefetch and serve-expired"

	fmt.Printf("bench/serve: %d servers on CPU %s, dnsperf and the upstream on CPU %s, %d runs of %v each, %d hit names\n",
		len(servers), serverCPU, loadCPU, p.runs, p.duration, p.names)
	hits := filepath.Join(work, "hits.txt")
	if err := writeLines(hits, p.names, hitName); err != nil {
		return err
	}
	warm := func(s *server) error {
		_, err := load(work, s, hits, 2*time.Second, true, warmQPS)
		return err
	}

	if p.idle > 0 && p.idleRuns > 0 {
		if err := idleCPU(os.Stdout, servers, p.idle, p.idleRuns); err != nil {
			return err
		}
	}
	var tables []table
	if p.runs > 0 {
		if tables, err = workloads(work, p, servers, hints, hits, warm); err != nil {
			return err
		}
	}
	var mem memory
	if p.soak > 0 {
		if mem, err = soak(work, p, slices.DeleteFunc(slices.Clone(servers), func(s *server) bool { return s.resilient || s.name == responderName }), logTo); err != nil {
			return err
		}
	}
	printTargets(os.Stdout, tables, mem)
	return nil
}

// startLoadSide pins this process (dnsperf's parent) to the load CPU and starts the upstream there, answering.
func startLoadSide(names int) (*upstream, error) {
	if err := pinSelf(loadCPU); err != nil {
		return nil, err
	}
	up, err := startUpstream(names)
	if err != nil {
		return nil, err
	}
	if err := waitAnswer(upstreamIP, hitName(0)); err != nil {
		up.stop()
		return nil, fmt.Errorf("upstream: %w", err)
	}
	return up, nil
}

func newRows(servers []*server, hints map[string]string) map[string]*row {
	m := map[string]*row{}
	for _, s := range servers {
		m[s.name] = &row{s: s, hint: hints[s.name]}
	}
	return m
}

func ordered(m map[string]*row, servers []*server) []row {
	var out []row
	for _, s := range servers {
		if r, ok := m[s.name]; ok {
			out = append(out, *r)
		}
	}
	return out
}

func waitAnswer(ip, name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := harness.Lookup(ip+":53", "udp", name, 200*time.Millisecond)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
