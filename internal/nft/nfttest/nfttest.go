// Package nfttest starts the kernel tests of the packages beside nft (nft/foreign, nft/nftwatch): a flushed
// ruleset in the test's network namespace and an owning socket of ours, torn down after the test. nft's own
// tests have theirs (main_test.go), which cannot import this package.
//
// May touch: the network namespaces, interfaces, files, listeners a test makes through it, with the commands it runs there.
package nfttest

import (
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// FreshConn flushes the namespace's ruleset and opens an owning socket that tears our table down after the
// test. It skips the test without root (testenv.RequireRoot).
func FreshConn(t *testing.T) *nftconn.Conn {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.Run(t, "nft", "flush", "ruleset")
	c, err := nftconn.Open(nftconn.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Teardown(); err != nil {
			t.Errorf("Teardown: %v", err)
		}
		_ = c.Close()
	})
	return c
}
