package nftwatch

import (
	"net/netip"
	"os"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nfttest"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Kernel tests run as root in a throwaway network namespace (testenv.Main re-executes the binary there).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func freshConn(t *testing.T) *nftconn.Conn { return nfttest.FreshConn(t) }

// dualStack is a table of ours with both families' rules.
var dualStack = nft.Spec{LocalIPs: []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("fd00::a")},
	DNSPort: 53, HealthPort: 8080}
