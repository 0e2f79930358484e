package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// BuildAgent builds cmd/nodelocaldns with the extra `go build` arguments and environment into
// out/testbin/<name> of this checkout, and returns its path. The test processes of one checkout share that
// file under a lock: the first builds it, the others find it up to date (go build leaves an up-to-date target
// alone), and nothing is left in the temporary directory per test process, as a copy per process was (57 MB
// each, a few per `make test`, until the disk filled).
func BuildAgent(name string, env []string, args ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "out", "testbin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	path := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", path}, args...), "github.com/nodelocaldns/nodelocaldns/cmd/nodelocaldns")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %q: %v\n%s", args, err, out)
	}
	return path, nil
}

// moduleRoot is the directory of the go.mod above the working directory (a test runs in its package's).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
