package testenv

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// KernelAtLeast says whether the running kernel's release is major.minor or later, for a test whose assertion
// rests on a kernel behaviour that came with that release (false when the release cannot be read).
func KernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), major, minor)
}

func releaseAtLeast(release string, major, minor int) bool {
	maj, rest, _ := strings.Cut(release, ".")
	a, err := strconv.Atoi(maj)
	if err != nil {
		return false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	b, err := strconv.Atoi(rest[:end])
	if err != nil {
		return false
	}
	return a > major || a == major && b >= minor
}
