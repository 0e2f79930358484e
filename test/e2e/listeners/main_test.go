package listeners

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// squatEnv makes the test binary a squatter instead: it listens on the address the variable names, without
// SO_REUSEPORT, says "listening" on stdout and holds the port until killed (squat_test.go).
const squatEnv = "LISTENERS_SQUAT_TCP"

// hogEnv makes the test binary a CPU hog instead: it spins until killed (reload_test.go).
const hogEnv = "LISTENERS_HOG"

// TestMain runs the tests as root in a throwaway network namespace (testenv.Main re-executes the binary there).
func TestMain(m *testing.M) {
	if addr := os.Getenv(squatEnv); addr != "" {
		os.Exit(squat(addr))
	}
	if os.Getenv(hogEnv) != "" {
		for n := 0; ; n++ { // spin
		}
	}
	os.Exit(testenv.Main(m))
}

func squat(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	fmt.Println("listening")
	// Asleep, not blocked: a bare `select {}` with no other goroutine is the runtime's "all goroutines are
	// asleep" crash, which frees the port.
	for {
		time.Sleep(time.Hour)
	}
}
