package reconcile

import (
	"os"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
