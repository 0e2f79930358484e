package listeners

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// TestSquattedPort: another process holds, without SO_REUSEPORT, a port the agent binds on every address (the
// health port 8080, the DNS port 53 over TCP). The agent cannot start, and its error names the port and the
// process holding it (pid and command), which runs in this pid namespace and so is visible.
func TestSquattedPort(t *testing.T) {
	testenv.RequireRoot(t)
	for _, port := range []string{"8080", "53"} {
		t.Run(port, func(t *testing.T) {
			harness.NewNode(t)
			pid := startSquatter(t, net.JoinHostPort("0.0.0.0", port))
			p := startPod(t)
			code := p.Wait(30 * time.Second)
			if code == 0 {
				t.Fatal("the agent exited 0 with its port held")
			}
			var text strings.Builder
			for _, l := range p.Lines() {
				for _, v := range l.Raw {
					if s, ok := v.(string); ok {
						text.WriteString(s + "\n")
					}
				}
			}
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			// Go listens on 0.0.0.0 with a dual-stack IPv6 socket: [::].
			for _, want := range []string{"tcp port " + port + " is held by a socket on [::]:" + port,
				"pid " + strconv.Itoa(pid) + " (" + strings.TrimSpace(string(comm)) + ")"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("the agent's log (exit %d) lacks %q:\n%s", code, want, text.String())
				}
			}
		})
	}
}

// startSquatter runs this test binary as a squatter on addr (main_test.go) and returns its pid once it listens.
func startSquatter(t *testing.T, addr string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), squatEnv+"="+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "listening" {
		t.Fatalf("squatter on %s did not listen: %q", addr, line)
	}
	return cmd.Process.Pid
}
