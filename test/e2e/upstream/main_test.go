package upstream

import (
	"os"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// TestMain runs the tests as root in a throwaway network namespace (testenv.Main re-executes the binary there).
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
