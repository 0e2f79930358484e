package corefile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Deadlines only bound how long a failing test waits; passing tests return as soon as the event is seen.
const (
	testDebounce = 20 * time.Millisecond
	waitLimit    = 5 * time.Second
)

// watched runs a Watcher over dirs and records what onChange saw: the kube-dns config of the first directory,
// loaded in the callback as the supervisor would.
type watched struct {
	logs  *observer.ObservedLogs
	calls chan KubeDNS

	mu   sync.Mutex
	seen []KubeDNS
}

func startWatcher(t *testing.T, dirs []string, debounce time.Duration) *watched {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	w, err := NewWatcher(zap.New(core), dirs, debounce)
	if err != nil {
		t.Fatal(err)
	}
	wd := &watched{logs: logs, calls: make(chan KubeDNS, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func() {
			kd, _ := LoadKubeDNS(dirs[0])
			wd.mu.Lock()
			wd.seen = append(wd.seen, kd)
			wd.mu.Unlock()
			wd.calls <- kd
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

// next waits for the next onChange call.
func (wd *watched) next(t *testing.T) KubeDNS {
	t.Helper()
	select {
	case kd := <-wd.calls:
		return kd
	case <-time.After(waitLimit):
		t.Fatalf("no change reported within %v", waitLimit)
		return KubeDNS{}
	}
}

func (wd *watched) count() int {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	return len(wd.seen)
}

// checks is the number of debounced re-reads done so far.
func (wd *watched) checks() int {
	return wd.logs.FilterMessage("config directories checked").Len()
}

// waitChecks waits until the watcher has re-read the directories more than n times.
func (wd *watched) waitChecks(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); wd.checks() <= n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("watcher did not re-read the directories within %v", waitLimit)
		}
	}
}

func stubs(domain string) map[string]string {
	return map[string]string{keyStubDomains: fmt.Sprintf(`{%q: ["192.0.2.1"]}`, domain)}
}

func hasStub(kd KubeDNS, domain string) bool { return kd.StubDomains[domain] != nil }

func TestWatcherReportsChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	writeConfigMap(t, dir, stubs("one.example"))
	wd := startWatcher(t, []string{dir}, testDebounce)

	start := time.Now()
	writeConfigMap(t, dir, stubs("two.example"))
	if kd := wd.next(t); !hasStub(kd, "two.example") {
		t.Fatalf("onChange saw %+v, want two.example", kd)
	}
	t.Logf("..data swap to callback: %v (debounce %v)", time.Since(start), testDebounce)

	// Removing a key is a change too (its symlink goes away; nothing in ..data is touched for it).
	writeConfigMap(t, dir, map[string]string{keyUpstreamNameservers: `["198.51.100.1"]`})
	if kd := wd.next(t); kd.StubDomains != nil || len(kd.UpstreamNameservers) != 1 {
		t.Fatalf("onChange saw %+v, want upstreams only", kd)
	}
}

func TestWatcherIgnoresIdenticalRewrite(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "kube-dns")
	writeConfigMap(t, dir, stubs("one.example"))
	wd := startWatcher(t, []string{dir}, testDebounce)

	n := wd.checks()
	writeConfigMap(t, dir, stubs("one.example")) // new ..<timestamp> dir, ..data swapped, same content
	wd.waitChecks(t, n)
	if c := wd.count(); c != 0 {
		t.Fatalf("identical rewrite reported %d times", c)
	}
	// The watcher is still alive and reports the next real change, once.
	writeConfigMap(t, dir, stubs("two.example"))
	if kd := wd.next(t); !hasStub(kd, "two.example") {
		t.Fatalf("onChange saw %+v, want two.example", kd)
	}
	if c := wd.count(); c != 1 {
		t.Fatalf("%d callbacks, want 1", c)
	}
}

func TestWatcherBurst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	writeConfigMap(t, dir, stubs("v0.example"))
	wd := startWatcher(t, []string{dir}, DefaultDebounce)

	const updates = 20
	for i := 1; i <= updates; i++ {
		writeConfigMap(t, dir, stubs(fmt.Sprintf("v%d.example", i)))
	}
	last := fmt.Sprintf("v%d.example", updates)
	for kd := wd.next(t); !hasStub(kd, last); kd = wd.next(t) {
	}
	// Nothing is pending after the last content was seen: one more check must find no change.
	n := wd.checks()
	writeConfigMap(t, dir, stubs(last))
	wd.waitChecks(t, n)
	c := wd.count()
	t.Logf("%d updates -> %d callbacks", updates, c)
	if c > 5 {
		t.Fatalf("%d updates gave %d callbacks, want a few (<= 5)", updates, c)
	}
}

func TestWatcherDirectoryCreatedLate(t *testing.T) {
	root := t.TempDir()
	// One directory whose parent exists, one two levels below a missing directory.
	near := filepath.Join(root, "kube-dns")
	far := filepath.Join(root, "etc", "coredns")
	wd := startWatcher(t, []string{near, far}, testDebounce)

	writeConfigMap(t, near, stubs("late.example"))
	if kd := wd.next(t); !hasStub(kd, "late.example") {
		t.Fatalf("onChange saw %+v, want late.example", kd)
	}
	// Now watched directly: a change inside it is seen.
	writeConfigMap(t, near, stubs("later.example"))
	if kd := wd.next(t); !hasStub(kd, "later.example") {
		t.Fatalf("onChange saw %+v, want later.example", kd)
	}

	writeConfigMap(t, far, map[string]string{"Corefile.base": ".:53 {\n    whoami\n}\n"})
	wd.next(t)
	writeConfigMap(t, far, map[string]string{"Corefile.base": ".:53 {\n    errors\n}\n"})
	wd.next(t)
}

func TestWatcherDirectoryDeletedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	writeConfigMap(t, dir, stubs("one.example"))
	wd := startWatcher(t, []string{dir}, testDebounce)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if kd := wd.next(t); kd.StubDomains != nil {
		t.Fatalf("onChange saw %+v after the directory was deleted, want the zero config", kd)
	}
	writeConfigMap(t, dir, stubs("two.example"))
	if kd := wd.next(t); !hasStub(kd, "two.example") {
		t.Fatalf("onChange saw %+v, want two.example", kd)
	}
	writeConfigMap(t, dir, stubs("three.example"))
	if kd := wd.next(t); !hasStub(kd, "three.example") {
		t.Fatalf("onChange saw %+v, want three.example", kd)
	}
}

func TestWatcherSeveralDirectories(t *testing.T) {
	root := t.TempDir()
	kubeDNS, base := filepath.Join(root, "kube-dns"), filepath.Join(root, "coredns")
	writeConfigMap(t, kubeDNS, stubs("one.example"))
	writeConfigMap(t, base, map[string]string{"Corefile.base": ".:53 {\n    whoami\n}\n"})
	wd := startWatcher(t, []string{kubeDNS, base}, testDebounce)

	// Unrelated traffic next to the watched directories (their parent is watched) is not a change.
	n := wd.checks()
	write(t, root, "unrelated", "x")
	writeConfigMap(t, base, map[string]string{"Corefile.base": ".:53 {\n    errors\n}\n"})
	wd.next(t)
	wd.waitChecks(t, n)
	if c := wd.count(); c != 1 {
		t.Fatalf("%d callbacks, want 1", c)
	}
	if got := wd.logs.FilterMessage("config directory changed").All(); len(got) != 1 || got[0].ContextMap()["dir"] != base {
		t.Fatalf("changed-directory log %v, want one entry for %s", got, base)
	}
}

func TestNewWatcherNeedsADirectory(t *testing.T) {
	if _, err := NewWatcher(zap.NewNop(), nil, 0); err == nil {
		t.Fatal("NewWatcher with no directory succeeded")
	}
}
