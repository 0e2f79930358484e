// Package harness runs the real nodelocaldns binary for end-to-end tests and benchmarks: it builds the binary
// once per test process, starts it with node-cache's flags against fixtures it writes (Corefile.base, a
// kube-dns ConfigMap volume), follows its JSON log, and scrapes its metrics. Callers run inside a throwaway
// network namespace (internal/testenv); apart from [NewNode], which builds the node of the end-to-end tests, the
// harness never creates or touches links or tables.
package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/nodelocaldns once per process ([BuildAgent]) and returns its path: static, as `make build`
// and the image build it, or with the race detector (and so cgo) when $NODELOCALDNS_TEST_RACE is 1.
// NODELOCALDNS_BIN overrides it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("NODELOCALDNS_BIN"); p != "" {
			binPath = p
			return
		}
		if raceBuild() {
			binPath, buildErr = BuildAgent("nodelocaldns-race", []string{"CGO_ENABLED=1"}, "-race") // the race runtime needs cgo
		} else {
			binPath, buildErr = BuildAgent("nodelocaldns", []string{"CGO_ENABLED=0"})
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Agent is one running nodelocaldns process.
type Agent struct {
	t       testing.TB
	Cmd     *exec.Cmd
	Dir     string // holds Corefile.base (in Dir/coredns), the written Corefile and the pidfile
	Metrics string // host:port of -metrics-listen-address

	mu    sync.Mutex
	lines []LogLine
	races raceReports // the race detector's reports on stderr (a race-built binary)
	cond  *sync.Cond
	done  chan struct{}
	err   error
}

// LogLine is one JSON log line of the agent.
type LogLine struct {
	Level, Msg string
	Raw        map[string]any
}

// Config describes an agent to start.
type Config struct {
	Bin          string    // the binary; "" = Binary's
	Args         []string  // flags; -basecorefile, -conf, -pidfile and -metrics-listen-address are added unless given
	BaseCorefile string    // content of Corefile.base
	Env          []string  // extra environment, e.g. KUBE_DNS_UPSTREAM_SERVICE_HOST=...
	Dir          string    // reuse a directory (a restart); "" = a new temp dir
	Stderr       io.Writer // a copy of the log, e.g. for debugging; nil = none
}

// Start starts the agent and returns at once; use WaitReady.
func Start(t testing.TB, cfg Config) *Agent {
	t.Helper()
	bin := cfg.Bin
	if bin == "" {
		bin = Binary(t)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(filepath.Join(dir, "coredns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if cfg.BaseCorefile != "" {
		if err := os.WriteFile(filepath.Join(dir, "coredns", "Corefile.base"), []byte(cfg.BaseCorefile), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{t: t, Dir: dir, done: make(chan struct{})}
	a.cond = sync.NewCond(&a.mu)
	args := append([]string{}, cfg.Args...)
	has := func(flag string) bool {
		for _, x := range args {
			if strings.TrimLeft(strings.SplitN(x, "=", 2)[0], "-") == flag {
				return true
			}
		}
		return false
	}
	if !has("basecorefile") {
		args = append(args, "-basecorefile", filepath.Join(dir, "coredns", "Corefile.base"))
	}
	if !has("conf") {
		args = append(args, "-conf", filepath.Join(dir, "Corefile"))
	}
	if !has("pidfile") {
		args = append(args, "-pidfile", filepath.Join(dir, "node-cache.pid"))
	}
	if !has("metrics-listen-address") {
		args = append(args, "-metrics-listen-address", "127.0.0.1:"+FreePort(t))
	}
	for i, x := range args {
		if strings.TrimLeft(x, "-") == "metrics-listen-address" && i+1 < len(args) {
			a.Metrics = args[i+1]
		} else if v, ok := strings.CutPrefix(strings.TrimLeft(x, "-"), "metrics-listen-address="); ok {
			a.Metrics = v
		}
	}
	a.Cmd = exec.Command(bin, args...)
	a.Cmd.Env = append(os.Environ(), cfg.Env...)
	a.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := a.Cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go a.follow(stderr, cfg.Stderr)
	t.Cleanup(func() {
		a.Kill()
		a.mu.Lock()
		defer a.mu.Unlock()
		if races := a.races.all(); len(races) > 0 {
			t.Errorf("the agent's race detector reported %d data race(s):\n%s", len(races), strings.Join(races, "\n"))
		}
	})
	return a
}

func (a *Agent) follow(r io.Reader, copyTo io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if copyTo != nil {
			fmt.Fprintln(copyTo, line)
		}
		var raw map[string]any
		ll := LogLine{Raw: raw}
		if json.Unmarshal([]byte(line), &raw) == nil {
			ll.Raw = raw
			ll.Level, _ = raw["level"].(string)
			ll.Msg, _ = raw["msg"].(string)
		} else {
			ll.Msg = line
		}
		a.mu.Lock()
		a.races.line(line)
		a.lines = append(a.lines, ll)
		a.cond.Broadcast()
		a.mu.Unlock()
	}
	err := a.Cmd.Wait()
	a.mu.Lock()
	a.err = err
	close(a.done)
	a.cond.Broadcast()
	a.mu.Unlock()
}

// WaitLog waits until a log line satisfies match, and returns it.
func (a *Agent) WaitLog(timeout time.Duration, what string, match func(LogLine) bool) LogLine {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() { a.mu.Lock(); a.cond.Broadcast(); a.mu.Unlock() })
	defer timer.Stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := 0; ; {
		for ; i < len(a.lines); i++ {
			if match(a.lines[i]) {
				return a.lines[i]
			}
		}
		select {
		case <-a.done:
			a.t.Fatalf("agent exited (%v) before logging %s; log:\n%s", a.err, what, a.logText())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("agent did not log %s within %v; log:\n%s", what, timeout, a.logText())
		}
		a.cond.Wait()
	}
}

// WaitReady waits for the agent's "ready" log line.
func (a *Agent) WaitReady() {
	a.t.Helper()
	a.WaitLog(30*time.Second, `"ready"`, func(l LogLine) bool { return l.Msg == "ready" })
}

// Lines returns the log lines so far.
func (a *Agent) Lines() []LogLine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]LogLine(nil), a.lines...)
}

func (a *Agent) logText() string {
	var b strings.Builder
	for _, l := range a.lines {
		j, _ := json.Marshal(l.Raw)
		if l.Raw == nil {
			j = []byte(l.Msg)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// Signal sends sig to the agent.
func (a *Agent) Signal(sig os.Signal) {
	if a.Cmd.Process != nil {
		a.Cmd.Process.Signal(sig)
	}
}

// Stop sends SIGTERM and waits for the exit; it returns the exit code.
func (a *Agent) Stop(timeout time.Duration) int {
	a.t.Helper()
	a.Signal(syscall.SIGTERM)
	return a.Wait(timeout)
}

// Wait waits for the process to exit and returns its exit code.
func (a *Agent) Wait(timeout time.Duration) int {
	a.t.Helper()
	select {
	case <-a.done:
	case <-time.After(timeout):
		a.Kill()
		a.t.Fatalf("agent did not exit within %v; log:\n%s", timeout, a.logText())
	}
	return a.Cmd.ProcessState.ExitCode()
}

// Kill kills the agent (SIGKILL) if it still runs and waits for it.
func (a *Agent) Kill() {
	select {
	case <-a.done:
		return
	default:
	}
	a.Cmd.Process.Kill()
	<-a.done
}

// Metric scrapes the agent's metrics endpoint and returns the value of the series whose name and labels
// (in Prometheus text form, e.g. `coredns_nodecache_setup_errors_total{errortype="configmap"}`) match exactly;
// ok is false when there is no such series.
func (a *Agent) Metric(series string) (float64, bool) {
	a.t.Helper()
	resp, err := http.Get("http://" + a.Metrics + "/metrics")
	if err != nil {
		a.t.Fatalf("scrape metrics: %v", err)
	}
	// Read to the end, so that the next scrape reuses the connection, as Prometheus does: the agent's metrics
	// listener holds 2 per source.
	defer func() {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// A label value may hold spaces (chain="ip filter/INPUT"): match the series as a prefix.
		value, ok := strings.CutPrefix(sc.Text(), series+" ")
		if ok {
			var v float64
			fmt.Sscan(value, &v)
			return v, true
		}
	}
	return 0, false
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort(t testing.TB) string { return testenv.FreePort(t, "tcp") }

// RunBinary runs the binary to completion with args and returns its combined output and exit code.
func RunBinary(t testing.TB, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if races := racesIn(string(out)); len(races) > 0 {
		t.Errorf("%s %s: the race detector reported %d data race(s):\n%s", bin, strings.Join(args, " "), len(races), strings.Join(races, "\n"))
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	return string(out), 0
}
