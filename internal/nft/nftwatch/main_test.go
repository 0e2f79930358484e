package nftwatch

import (
	"net/netip"
	"os"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Kernel tests run as root in a throwaway network namespace (testenv.Main re-executes the binary there).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// freshConn flushes the namespace's ruleset and opens an owning socket that tears our table down after the
// test: the writer whose notifications the watch is given to ignore.
func freshConn(t *testing.T) *nft.Conn {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.Run(t, "nft", "flush", "ruleset")
	c, err := nft.Open(nft.WithLogger(zaptest.NewLogger(t)))
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

// dualStack is a table of ours with both families' rules.
var dualStack = nft.Spec{LocalIPs: []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("fd00::a")},
	DNSPort: 53, HealthPort: 8080}
