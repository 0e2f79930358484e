package nft

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"go.uber.org/zap/zaptest"
)

// Kernel tests run as root in a throwaway network namespace (testenv.Main re-executes the binary there), so
// `nft flush ruleset` and friends below only ever touch that namespace.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// sh runs an observer command (nft, iptables, conntrack, ip) and fails the test on error.
func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nftStdin runs `nft -f -` with the given text.
func nftStdin(t *testing.T, text string) {
	t.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f -: %v\n%s\ninput:\n%s", err, out, text)
	}
}

// freshConn flushes the namespace's ruleset and opens a Conn that tears our tables down after the test.
func freshConn(t *testing.T) *Conn {
	t.Helper()
	testenv.RequireRoot(t)
	sh(t, "nft", "flush", "ruleset")
	c, err := Open(WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Teardown(); err != nil {
			t.Errorf("Teardown: %v", err)
		}
		if _, err := c.DeleteFallback(); err != nil { // not owned: it would outlive the test
			t.Errorf("DeleteFallback: %v", err)
		}
		_ = c.Close()
	})
	return c
}
