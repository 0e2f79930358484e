package nftconn

import (
	"os"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"go.uber.org/zap/zaptest"
)

// Kernel tests run as root in a throwaway network namespace (testenv.Main re-executes the binary there), so
// `nft flush ruleset` and friends below only ever touch that namespace.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// freshConn flushes the namespace's ruleset and opens a Conn that tears our tables down after the test.
func freshConn(t *testing.T) *Conn {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.Run(t, "nft", "flush", "ruleset")
	c, err := Open(WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Teardown(); err != nil {
			t.Errorf("Teardown: %v", err)
		}
		if _, err := c.Fallback().Delete(); err != nil { // not owned: it would outlive the test
			t.Errorf("DeleteFallback: %v", err)
		}
		_ = c.Close()
	})
	return c
}
