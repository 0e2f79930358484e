package foreign

import (
	"os"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// Kernel tests run as root in a throwaway network namespace (testenv.Main re-executes the binary there), so
// the firewalls they write and `nft flush ruleset` only ever touch that namespace.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
