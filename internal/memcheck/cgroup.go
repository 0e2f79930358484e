package memcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// unlimitedV1 is where cgroup v1's memory.limit_in_bytes says "no limit": the largest page-aligned int64
// (9223372036854771712); anything from here up is unlimited.
const unlimitedV1 = 1 << 62

// CgroupLimit returns the memory limit of our own cgroup, 0 when there is none, and the file it came from. It
// reads /proc/self/cgroup to find the cgroup, then cgroup v2's memory.max under root (/sys/fs/cgroup), then
// cgroup v1's memory/…/memory.limit_in_bytes. Inside a container with its own cgroup namespace the path is "/"
// and the files sit at the top of the mount; where the namespace is shared the path is followed.
func CgroupLimit(root, procSelfCgroup string) (limit int64, file string, err error) {
	raw, err := os.ReadFile(procSelfCgroup)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", procSelfCgroup, err)
	}
	v2, v1 := cgroupPaths(raw)
	var candidates []string
	if v2 != "" {
		candidates = append(candidates, filepath.Join(root, v2, "memory.max"), filepath.Join(root, "memory.max"))
	}
	if v1 != "" {
		candidates = append(candidates, filepath.Join(root, "memory", v1, "memory.limit_in_bytes"),
			filepath.Join(root, "memory", "memory.limit_in_bytes"))
	}
	for _, f := range candidates {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, f, fmt.Errorf("read %s: %w", f, err)
		}
		limit, err := parseLimit(strings.TrimSpace(string(b)))
		if err != nil {
			return 0, f, fmt.Errorf("%s: %w", f, err)
		}
		return limit, f, nil
	}
	return 0, "", nil
}

// cgroupPaths finds in /proc/self/cgroup the v2 path ("0::/path") and the v1 memory controller's
// ("4:memory:/path").
func cgroupPaths(raw []byte) (v2, v1 string) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	return v2, v1
}

func parseLimit(s string) (int64, error) {
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("memory limit %q is not a number of bytes", s)
	}
	if n >= unlimitedV1 {
		return 0, nil
	}
	return n, nil
}
