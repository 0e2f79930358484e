package link

import (
	"os"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestMain re-executes the tests as root inside a throwaway network namespace: the kernel tests create and
// delete links, which must never happen in the machine's own namespace.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
