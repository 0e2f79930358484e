// Package testenv gives tests and benchmarks a throwaway network namespace.
//
// Anything that touches netlink must never run in the machine's own namespace. A package whose tests need the
// kernel calls [Main] from its TestMain: when run as root, the test binary re-executes itself inside a fresh
// network namespace (CLONE_NEWNET) with loopback up, so every goroutine, every child process and every netlink
// socket of that run sees only the throwaway namespace, which the kernel frees when the process exits. Tests
// that need root call [RequireRoot] and skip with a clear message elsewhere.
//
// Inside it, tests build what they send traffic through with the same few helpers: [AddPeer] (a namespace
// joined by veth, ready for IPv6 when it returns), [NewPodNetwork] (the pod and kube-dns peers of a node),
// [ServeDNS] (a DNS server on UDP and TCP), [StartUpstream] (the one fake upstream, on it), [NftApply] and [Run] (fixture and observer commands), and
// [Eventually] to wait on a signal.
//
// May touch: the network namespaces, interfaces, files, listeners a test makes through it, with the commands it runs there.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

// envMarker is set in the re-executed child so it knows it already runs in its own namespace.
const envMarker = "NODELOCALDNS_TEST_NETNS"

// envEmulator names the user-mode emulator the test binaries run under; `make test-arm64` sets it to
// qemu-aarch64. qemu-user can neither clone into a new network namespace (EINVAL) nor pass nftables netlink
// (it translates NETLINK_ROUTE, NETLINK_AUDIT and NETLINK_KOBJECT_UEVENT only), so under it [Main] does not
// re-execute and [RequireRoot] skips: a package's pure tests run, its kernel tests do not.
const envEmulator = "NODELOCALDNS_TEST_EMULATOR"

// IsRoot reports whether the process can create namespaces and program the kernel.
func IsRoot() bool { return os.Geteuid() == 0 }

// InThrowawayNetNS reports whether this process was re-executed into a fresh network namespace by [Main] or [Reexec].
func InThrowawayNetNS() bool { return os.Getenv(envMarker) == "1" }

// Emulator is the user-mode emulator the tests run under (see envEmulator), or "".
func Emulator() string { return os.Getenv(envEmulator) }

// RequireRoot skips t unless the test runs as root inside a throwaway network namespace.
func RequireRoot(t testing.TB) {
	t.Helper()
	if e := Emulator(); e != "" {
		t.Skipf("skipping: under user-mode emulation (%s=%s): no network namespaces, no nftables netlink", envEmulator, e)
	}
	if !IsRoot() {
		t.Skip("skipping: needs root to create a throwaway network namespace (run `make test` as root)")
	}
	if !InThrowawayNetNS() {
		t.Skip("skipping: not inside a throwaway network namespace (the package's TestMain must call testenv.Main)")
	}
}

// RequireIPv6 skips the test on a kernel without IPv6 (booted with ipv6.disable=1).
func RequireIPv6(t testing.TB) {
	t.Helper()
	if !ipv6Enabled() {
		t.Skip("skipping: the kernel has no IPv6 (/proc/sys/net/ipv6 is missing)")
	}
}

// Main runs the tests of a package in a throwaway network namespace when root, and as they are otherwise
// (kernel tests then skip through RequireRoot). Use it as `func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }`.
func Main(m *testing.M) int {
	if code, reexeced := Reexec(); reexeced {
		return code
	}
	return m.Run()
}

// Reexec re-executes the current binary, with the same arguments, inside a new network namespace with loopback
// up, and returns its exit code and true. In the child (already in the new namespace), or when not root, it
// brings up loopback where it can and returns false: the caller then goes on with its own work. Under an
// emulator it returns false at once (RequireRoot then skips). Benchmarks use it the same way as tests.
func Reexec() (int, bool) {
	if !IsRoot() || Emulator() != "" {
		return 0, false
	}
	if InThrowawayNetNS() {
		if err := loopbackUp(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: bring up loopback: %v\n", err)
			return 1, true
		}
		return 0, false
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: find own executable: %v\n", err)
		return 1, true
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envMarker+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), true
		}
		fmt.Fprintf(os.Stderr, "testenv: re-exec in a new network namespace: %v\n", err)
		return 1, true
	}
	return 0, true
}

func loopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}
