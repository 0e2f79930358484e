package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// ownerFlagSince is the first kernel with NFT_TABLE_F_OWNER; older ones refuse it with EINVAL, and the agent
// cannot create its table (internal/nft ErrNoOwnerFlag).
var ownerFlagSince = [2]int{5, 12}

// printPreflight writes, for -print-rules, whether this kernel can hold the printed table: one line on stderr, so
// that stdout stays the ruleset alone. It reads the kernel release and touches nothing: a distribution kernel
// that backports the flag to an older release is reported as too old, the line says how to tell.
func printPreflight(stderr io.Writer) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		fmt.Fprintf(stderr, "nodelocaldns: preflight: kernel release not read: %v\n", err)
		return
	}
	fmt.Fprintln(stderr, preflightLine(unix.ByteSliceToString(u.Release[:])))
}

// preflightLine judges a kernel release ("6.1.0-18-amd64", "5.10.0") against ownerFlagSince.
func preflightLine(release string) string {
	major, minor, ok := kernelVersion(release)
	switch {
	case !ok:
		return fmt.Sprintf("nodelocaldns: preflight: kernel %q: version not understood; %s", release, nft.ErrNoOwnerFlag)
	case major < ownerFlagSince[0] || major == ownerFlagSince[0] && minor < ownerFlagSince[1]:
		return fmt.Sprintf("nodelocaldns: preflight: FAIL: kernel %s is older than %d.%d: %s "+
			"(a kernel that backports the flag passes: the agent's start-up says for sure)",
			release, ownerFlagSince[0], ownerFlagSince[1], nft.ErrNoOwnerFlag)
	}
	return fmt.Sprintf("nodelocaldns: preflight: ok: kernel %s has NFT_TABLE_F_OWNER (%d.%d or later)",
		release, ownerFlagSince[0], ownerFlagSince[1])
}

func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	minorDigits := parts[1] // "12" of "5.12-rc1" too
	if i := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = parts[1][:i]
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(minorDigits)
	return major, minor, err1 == nil && err2 == nil
}
