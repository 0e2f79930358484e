package configwatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// waitLimit only bounds how long a failing test waits; passing tests return as soon as the event is seen.
const waitLimit = 5 * time.Second

// key is the ConfigMap key the tests change; onChange reads it through its symlink, as the supervisor would.
const key = "stubDomains"

// watched runs a Watcher over dirs and records what onChange saw: the value of key in the first directory.
type watched struct {
	logs  *observer.ObservedLogs
	calls chan string

	mu   sync.Mutex
	seen []string
}

func startWatcher(t *testing.T, cfg Config) *watched {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	cfg.Log = zap.New(core)
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wd := &watched{logs: logs, calls: make(chan string, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func() {
			b, _ := os.ReadFile(filepath.Join(cfg.Dirs[0], key))
			wd.mu.Lock()
			wd.seen = append(wd.seen, string(b))
			wd.mu.Unlock()
			wd.calls <- string(b)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil after cancel", err)
		}
	})
	return wd
}

// change writes v into the ConfigMap directory dir and waits until onChange reports it.
func (wd *watched) change(t *testing.T, dir, v string) {
	t.Helper()
	testenv.WriteConfigMap(t, dir, value(v))
	if got := wd.next(t); got != v {
		t.Fatalf("onChange saw %q, want %s", got, v)
	}
}

// next waits for the next onChange call and returns the value it read.
func (wd *watched) next(t *testing.T) string {
	t.Helper()
	select {
	case v := <-wd.calls:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("no change reported within %v", waitLimit)
		return ""
	}
}

func (wd *watched) count() int {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	return len(wd.seen)
}

// checks is the number of re-reads done so far.
func (wd *watched) checks() int {
	return wd.logs.FilterMessage("config directories checked").Len()
}

// waitChecks waits until the watcher has re-read the directories more than n times.
func (wd *watched) waitChecks(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, waitLimit, "watcher re-reads the directories", func() bool { return wd.checks() > n })
}

func value(v string) map[string]string { return map[string]string{key: v} }

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherReportsChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	testenv.WriteConfigMap(t, dir, value("one"))
	wd := startWatcher(t, Config{Dirs: []string{dir}})

	start := time.Now()
	wd.change(t, dir, "two")
	t.Logf("..data swap to callback: %v", time.Since(start))

	// Removing a key is a change too (its symlink goes away; nothing in ..data is touched for it).
	testenv.WriteConfigMap(t, dir, map[string]string{"other": "x"})
	if v := wd.next(t); v != "" {
		t.Fatalf("onChange saw %q, want the key gone", v)
	}
}

func TestWatcherIgnoresIdenticalRewrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	testenv.WriteConfigMap(t, dir, value("one"))
	wd := startWatcher(t, Config{Dirs: []string{dir}})

	n := wd.checks()
	testenv.WriteConfigMap(t, dir, value("one")) // new ..<timestamp> dir, ..data swapped, same content
	wd.waitChecks(t, n)
	if c := wd.count(); c != 0 {
		t.Fatalf("identical rewrite reported %d times", c)
	}
	// The watcher is still alive and reports the next real change, once.
	wd.change(t, dir, "two")
	if c := wd.count(); c != 1 {
		t.Fatalf("%d callbacks, want 1", c)
	}
}

// A burst of updates ends in the last one, and every report is a real change: the watcher does not debounce
// (the supervisor's runner coalesces), so the bound is one report per update, in order, never a stale one last.
func TestWatcherBurst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	testenv.WriteConfigMap(t, dir, value("v0"))
	wd := startWatcher(t, Config{Dirs: []string{dir}})

	const updates = 20
	for i := 1; i <= updates; i++ {
		testenv.WriteConfigMap(t, dir, value(fmt.Sprintf("v%d", i)))
	}
	last := fmt.Sprintf("v%d", updates)
	for v := wd.next(t); v != last; v = wd.next(t) {
	}
	// Nothing is pending after the last content was seen: one more check must find no change.
	n := wd.checks()
	testenv.WriteConfigMap(t, dir, value(last))
	wd.waitChecks(t, n)
	c := wd.count()
	t.Logf("%d updates -> %d callbacks", updates, c)
	if c > updates {
		t.Fatalf("%d updates gave %d callbacks: a callback without a change", updates, c)
	}
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if got := wd.seen[len(wd.seen)-1]; got != last {
		t.Fatalf("last callback saw %q, want %q", got, last)
	}
}

func TestWatcherDirectoryCreatedLate(t *testing.T) {
	root := t.TempDir()
	// One directory whose parent exists, one two levels below a missing directory.
	near := filepath.Join(root, "kube-dns")
	far := filepath.Join(root, "etc", "coredns")
	wd := startWatcher(t, Config{Dirs: []string{near, far}})

	wd.change(t, near, "late")
	// Now watched directly: a change inside it is seen.
	wd.change(t, near, "later")

	testenv.WriteConfigMap(t, far, map[string]string{"Corefile.base": ".:53 {\n    whoami\n}\n"})
	wd.next(t)
	testenv.WriteConfigMap(t, far, map[string]string{"Corefile.base": ".:53 {\n    errors\n}\n"})
	wd.next(t)
}

// makingAdd creates a directory just before its watch of an ancestor is in place, as a volume's MkdirAll can
// between the watcher's look at the path and its inotify_add_watch.
type makingAdd struct {
	notifier
	ancestor, dir string
	made          atomic.Bool
}

func (m *makingAdd) Add(p string) error {
	if p == m.ancestor && m.made.CompareAndSwap(false, true) {
		if err := os.Mkdir(m.dir, 0o755); err != nil {
			return err
		}
	}
	return m.notifier.Add(p)
}

// TestWatcherDirectoryCreatedBeforeItsAncestorsWatch: the directory appears below an ancestor after the watcher
// chose to watch that ancestor but before the watch was in place, so no event says so; the watcher still
// watches it, and the ConfigMap then written into it is reported. (CI's race stage once missed it so in
// TestWatcherDirectoryCreatedLate: the directory empty when re-read, which digests as a missing one, and
// nothing watching what was written into it.)
func TestWatcherDirectoryCreatedBeforeItsAncestorsWatch(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, "etc")
	dir := filepath.Join(parent, "coredns")
	m := &makingAdd{ancestor: parent, dir: dir}
	wd := startWatcher(t, Config{Dirs: []string{dir}, newNotifier: func() (notifier, error) {
		n, err := newFsnotify()
		m.notifier = n
		return m, err
	}})
	n := wd.checks()
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	wd.waitChecks(t, n) // the check that watched parent, and made dir on the way
	if !m.made.Load() {
		t.Fatal("the watcher never watched the parent")
	}
	if c := wd.count(); c != 0 {
		t.Fatalf("%d callbacks for an empty directory, want none (it digests like a missing one)", c)
	}
	wd.change(t, dir, "one")
}

func TestWatcherDirectoryDeletedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	testenv.WriteConfigMap(t, dir, value("one"))
	wd := startWatcher(t, Config{Dirs: []string{dir}})

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if v := wd.next(t); v != "" {
		t.Fatalf("onChange saw %q after the directory was deleted, want nothing", v)
	}
	wd.change(t, dir, "two")
	wd.change(t, dir, "three")
}

func TestWatcherSeveralDirectories(t *testing.T) {
	root := t.TempDir()
	kubeDNS, base := filepath.Join(root, "kube-dns"), filepath.Join(root, "coredns")
	testenv.WriteConfigMap(t, kubeDNS, value("one"))
	testenv.WriteConfigMap(t, base, map[string]string{"Corefile.base": ".:53 {\n    whoami\n}\n"})
	wd := startWatcher(t, Config{Dirs: []string{kubeDNS, base}})

	// Unrelated traffic next to the watched directories (their parent is watched) is not a change.
	n := wd.checks()
	write(t, root, "unrelated", "x")
	testenv.WriteConfigMap(t, base, map[string]string{"Corefile.base": ".:53 {\n    errors\n}\n"})
	wd.next(t)
	wd.waitChecks(t, n)
	if c := wd.count(); c != 1 {
		t.Fatalf("%d callbacks, want 1", c)
	}
	if got := wd.logs.FilterMessage("config directory changed").All(); len(got) != 1 || got[0].ContextMap()["dir"] != base {
		t.Fatalf("changed-directory log %v, want one entry for %s", got, base)
	}
}

func TestNewNeedsADirectory(t *testing.T) {
	if _, err := New(Config{Log: zap.NewNop()}); err == nil {
		t.Fatal("New with no directory succeeded")
	}
}

// gauge records the polling gauge's value.
type gauge struct {
	mu sync.Mutex
	v  float64
}

func (g *gauge) Set(v float64) { g.mu.Lock(); g.v = v; g.mu.Unlock() }
func (g *gauge) get() float64  { g.mu.Lock(); defer g.mu.Unlock(); return g.v }

// refusingAdd is a real inotify watcher whose inotify_add_watch fails as it does once max_user_watches is used up.
type refusingAdd struct{ notifier }

func (refusingAdd) Add(string) error { return fmt.Errorf("add watch: %w", syscall.ENOSPC) }

// Exhausted inotify limits do not fail start-up: the watcher warns, sets the polling gauge, and its periodic
// re-read reports a real change made through the kubelet's ..data swap. The failures are the kernel's errors for
// those limits (inotify_init1: EMFILE once max_user_instances is reached; inotify_add_watch: ENOSPC once
// max_user_watches is), injected through the notifier constructor rather than by lowering the host-wide limits.
func TestWatcherDegradesToPolling(t *testing.T) {
	for _, tc := range []struct {
		name        string
		newNotifier func() (notifier, error)
		op          string
		errno       syscall.Errno
	}{
		{"inotify_init EMFILE", func() (notifier, error) { return nil, fmt.Errorf("inotify_init1: %w", syscall.EMFILE) }, "inotify_init", syscall.EMFILE},
		{"inotify_add_watch ENOSPC", func() (notifier, error) {
			n, err := newFsnotify()
			return refusingAdd{n}, err
		}, "inotify_add_watch ", syscall.ENOSPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "kube-dns")
			testenv.WriteConfigMap(t, dir, value("one"))
			g := &gauge{v: -1}
			wd := startWatcher(t, Config{Dirs: []string{dir}, Polling: g, PollInterval: 20 * time.Millisecond, newNotifier: tc.newNotifier})

			warns := wd.logs.FilterMessage("inotify unavailable; re-reading the config directories periodically instead").All()
			if len(warns) != 1 || warns[0].Level != zapcore.WarnLevel {
				t.Fatalf("warnings %v, want one", warns)
			}
			if op, _ := warns[0].ContextMap()["op"].(string); !strings.HasPrefix(op, tc.op) {
				t.Errorf("warning names op %q, want %q", op, tc.op)
			}
			if got, _ := warns[0].ContextMap()["error"].(string); got != tc.errno.Error() && !strings.HasSuffix(got, ": "+tc.errno.Error()) {
				t.Errorf("warning's error %q, want the kernel's %q", got, tc.errno.Error())
			}
			if v := g.get(); v != 1 {
				t.Errorf("polling gauge %v, want 1", v)
			}
			wd.change(t, dir, "two")
			// Polling re-reads without changes report nothing.
			n := wd.checks()
			wd.waitChecks(t, n+2)
			if c := wd.count(); c != 1 {
				t.Fatalf("%d callbacks, want 1", c)
			}
		})
	}
}

// With inotify working, the gauge says so.
func TestWatcherNotPolling(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	g := &gauge{v: -1}
	wd := startWatcher(t, Config{Dirs: []string{dir}, Polling: g})
	if v := g.get(); v != 0 {
		t.Errorf("polling gauge %v, want 0", v)
	}
	if n := wd.logs.FilterMessage("inotify unavailable; re-reading the config directories periodically instead").Len(); n != 0 {
		t.Errorf("%d degradation warnings with inotify working", n)
	}
}

// A log file written into the watched directory, line after line, is not a change and wakes nothing: only the
// keys that matter (and the kubelet's ..data swap) do. Without Config.Keys every line was a re-read of the whole
// directory, the log file included, and a reported change.
func TestWatcherIgnoresFilesThatDoNotMatter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "coredns")
	testenv.WriteConfigMap(t, dir, value("one"))
	wd := startWatcher(t, Config{Dirs: []string{dir}, Keys: map[string][]string{dir: {key}}})

	n := wd.checks()
	f, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 200 {
		fmt.Fprintf(f, "log line %d\n", i)
	}
	// A real change after the log lines: once it is reported, every event before it has been taken.
	wd.change(t, dir, "two")
	if got := wd.checks() - n; got != 1 {
		t.Errorf("%d re-reads for 200 log lines and one change, want 1", got)
	}
	if c := wd.count(); c != 1 {
		t.Errorf("%d changes reported, want 1", c)
	}
}

// In a plain directory (a hostPath, a test) the file that matters is written in place: that is a change, and a
// log file beside it is not.
func TestWatcherPlainDirectoryKeys(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, key, "one")
	wd := startWatcher(t, Config{Dirs: []string{dir}, Keys: map[string][]string{dir: {key}}})
	n := wd.checks()
	write(t, dir, "agent.log", "a line")
	write(t, dir, key, "two")
	// The truncation may be seen on its own, as an empty key, before the write.
	for got := wd.next(t); got != "two"; got = wd.next(t) {
		if got != "" {
			t.Fatalf("onChange saw %q after the key was written in place, want two", got)
		}
	}
	if got := wd.checks() - n; got > 2 {
		t.Errorf("%d re-reads, want at most 2 for one write of the key (truncate and write events)", got)
	}
}
