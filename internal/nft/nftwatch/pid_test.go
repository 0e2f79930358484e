package nftwatch

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

const pidNSChild = "NODELOCALDNS_TEST_PIDNS_CHILD"

// In a pid namespace of its own the agent is pid 1, like the host's init; a transaction the kernel stamps with
// pid 1 (the host's init, or any host process whose global pid equals one of our threads' local ids) is not ours.
// The test re-executes itself as pid 1 of a new pid namespace, as a container runs the agent.
func TestWatchOwnPIDInPIDNamespace(t *testing.T) {
	if os.Getenv(pidNSChild) == "1" {
		if os.Getpid() != 1 {
			t.Fatalf("pid %d in a new pid namespace, want 1", os.Getpid())
		}
		if pidsAreGlobal() {
			t.Fatal("pidsAreGlobal in a pid namespace of our own")
		}
		if isOwn(0, 1, nil, pidsAreGlobal()) {
			t.Fatal("a transaction by the host's pid 1 passes for our own")
		}
		return
	}
	testenv.RequireRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchOwnPIDInPIDNamespace$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), pidNSChild+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("in a new pid namespace: %v\n%s", err, out)
	}
}

// Where pids are global, our own threads' commits are recognised without the port (a socket not given to
// IgnoreConn), and nobody else's are.
func TestWatchOwnPIDGlobal(t *testing.T) {
	if !isOwn(0, uint32(os.Getpid()), nil, true) {
		t.Error("our own pid is not ours")
	}
	if isOwn(0, uint32(os.Getpid()), nil, false) {
		t.Error("a pid compared where pids are not global")
	}
	if isOwn(0, 0, nil, true) {
		t.Error("pid 0 (no pid attribute) passes for our own")
	}
}
