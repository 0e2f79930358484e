// Package scripts holds the tests of the shell helpers under scripts/ that the Makefile and the test scripts
// source; the helpers run for real, in bash.
package scripts

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// waitBound only bounds a failing test: a passing one moves on as soon as what it waits for happened.
const waitBound = 30 * time.Second

// lockKinds are the two kinds of lock a holder of the package system's lock files may take: apt and dpkg take
// POSIX (fcntl) locks, `flock FILE CMD` takes a flock(2) lock, and the two do not exclude each other.
var lockKinds = []struct {
	name string
	lock func(f *os.File) error
}{
	{"flock", func(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }},
	{"posix", func(f *os.File) error {
		return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0})
	}},
}

// apt runs `source apt.sh; SCRIPT` (go test runs in this directory) in bash with env added, its stderr read line by line into lines.
type apt struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
	log   []string
}

func startApt(t *testing.T, script string, env ...string) *apt {
	t.Helper()
	cmd := exec.Command("bash", "-c", "set -euo pipefail; source ./apt.sh; "+script)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &apt{cmd: cmd, lines: make(chan string, 1000), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
		a.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return a
}

// waitLine waits for a line of stderr containing s.
func (a *apt) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(waitBound)
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				t.Fatalf("exited before printing %q:\n%s", s, strings.Join(a.log, "\n"))
			}
			a.log = append(a.log, l)
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q within %v:\n%s", s, waitBound, strings.Join(a.log, "\n"))
		}
	}
}

// wait returns the exit error and the whole of stderr.
func (a *apt) wait(t *testing.T) (error, string) {
	t.Helper()
	timeout := time.After(waitBound)
	for {
		select {
		case l, ok := <-a.lines:
			if ok {
				a.log = append(a.log, l)
				continue
			}
			return <-a.done, strings.Join(a.log, "\n")
		case <-timeout:
			t.Fatalf("still running after %v:\n%s", waitBound, strings.Join(a.log, "\n"))
		}
	}
}

// releasedCheck is bash that fails unless the test has written the file $RELEASED, which it does just before it
// lets the lock go: whatever runs after the wait proves by it that the wait did not end while the lock was held.
const releasedCheck = `test -e "$RELEASED" || { echo "the wait ended while the lock was held" >&2; exit 1; }`

// release writes the RELEASED file, then lets go of the lock.
func release(t *testing.T, marker string, unlock func()) {
	t.Helper()
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unlock()
}

func lockFile(t *testing.T, path string, lock func(*os.File) error) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock(f); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	return func() { f.Close() } // closing the file drops either kind of lock
}

// A held lock is waited for: the wait says so, naming the holder, and ends only once the holder lets go.
func TestAptWaitsForTheLock(t *testing.T) {
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			dir := t.TempDir()
			free, held, marker := filepath.Join(dir, "free"), filepath.Join(dir, "held"), filepath.Join(dir, "released")
			if err := os.WriteFile(free, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			unlock := lockFile(t, held, k.lock)
			a := startApt(t, "apt_wait_locks; "+releasedCheck, "APT_LOCK_FILES="+free+" "+held, "APT_LOCK_TIMEOUT=300", "RELEASED="+marker)
			a.waitLine(t, "waiting up to 300 s")
			if !strings.Contains(a.log[len(a.log)-1], "(pid "+strconv.Itoa(os.Getpid())+") holds "+held) {
				t.Errorf("the wait does not name the holder (this test, pid %d) and the file: %s", os.Getpid(), a.log[len(a.log)-1])
			}
			release(t, marker, unlock)
			if err, out := a.wait(t); err != nil || !strings.Contains(out, "the lock is free after") {
				t.Errorf("after the release: %v\n%s", err, out)
			}
		})
	}
}

// A lock held past APT_LOCK_TIMEOUT fails the step, naming the holder.
func TestAptGivesUpNamingTheHolder(t *testing.T) {
	held := filepath.Join(t.TempDir(), "lock-frontend")
	lockFile(t, held, lockKinds[1].lock)
	a := startApt(t, "apt_get install nothing-at-all", "APT_LOCK_FILES="+held, "APT_LOCK_TIMEOUT=1")
	err, out := a.wait(t)
	if err == nil || !strings.Contains(out, "still locked after 1 s") || !strings.Contains(out, "(pid "+strconv.Itoa(os.Getpid())+") holds "+held) {
		t.Errorf("exit %v, want a failure naming pid %d and %s:\n%s", err, os.Getpid(), held, out)
	}
	if strings.Contains(out, "nothing-at-all") {
		t.Errorf("apt-get ran although the lock was never free:\n%s", out)
	}
}

// The real thing: `flock /var/lib/dpkg/lock-frontend` (what an operator's or unattended-upgrades' apt holds,
// as a flock here) during an apt-get install. apt-get itself does not see a flock(2) lock; the wait does, and
// the install runs after it. `--no-upgrade dpkg` takes the locks and changes nothing.
func TestAptInstallWaitsForTheDpkgLock(t *testing.T) {
	if !testenv.IsRoot() {
		t.Skip("needs root: the real dpkg lock and apt-get install")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("no apt-get here")
	}
	holder := exec.Command("flock", "/var/lib/dpkg/lock-frontend", "sh", "-c", "echo held; read x")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "held\n" {
		t.Fatalf("flock: %q, %v", l, err)
	}
	// apt-get, as a function, is what apt_get calls once its wait is over: it checks the marker first.
	marker := filepath.Join(t.TempDir(), "released")
	a := startApt(t, `apt-get() { `+releasedCheck+`; command apt-get "$@"; }; apt_get install -y --no-install-recommends --no-upgrade dpkg`,
		"APT_LOCK_TIMEOUT=300", "RELEASED="+marker)
	a.waitLine(t, "flock /var/lib/dpkg/lock-frontend")
	release(t, marker, func() { stdin.Close() }) // the holder's read ends, and with it the lock
	if err, out := a.wait(t); err != nil || !strings.Contains(out, "the lock is free after") {
		t.Errorf("after the release: %v\n%s", err, out)
	}
}
