package sockholder

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// listenEnv makes the test binary a listener in a process of its own: it prints its address and accepts
// connections, holding each open, until killed.
const listenEnv = "SOCKHOLDER_TEST_LISTEN"

func TestMain(m *testing.M) {
	if os.Getenv(listenEnv) != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(1)
		}
		fmt.Println(ln.Addr())
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			held = append(held, c)
		}
	}
	os.Exit(m.Run())
}

// TestPeerOwner: a connection to this process's own listener is this process's (once accepted); one to a
// listener of another process is another's once accepted, unknown before.
func TestPeerOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer (<-accepted).Close()
	if o, err := PeerOwner(c); o != OwnerThis || err != nil {
		t.Errorf("PeerOwner(connection to our own listener) = %v, %v; want this process", o, err)
	}

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), listenEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr, _ := bufio.NewReader(out).ReadString('\n')
	oc, err := net.Dial("tcp", strings.TrimSpace(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	seen := map[Owner]int{}
	for range 100 { // accepted by the other process at some point: before, no process has it
		o, err := PeerOwner(oc)
		if o == OwnerThis || err != nil {
			t.Fatalf("PeerOwner(connection to another process's listener) = %v, %v; want another process", o, err)
		}
		seen[o]++
	}
	if seen[OwnerOther] == 0 {
		t.Errorf("PeerOwner(connection to another process's listener): %v in 100 looks, never another process", seen)
	}
}

// TestPeerOwnerClosedByUs is issue 39's race made deterministic: this process's server answers a connection
// and closes it (as a server stopping for a reload does) before the client looks: the far end is then nobody's,
// and must not be called another process's. Before, it was.
func TestPeerOwnerClosedByUs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{})
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("answer"))
			c.Close() // returns once the socket has left this process (close(2) has released the file)
			close(closed)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 6)); err != nil {
		t.Fatal(err)
	}
	<-closed
	if o, err := PeerOwner(c); o == OwnerOther || err != nil {
		t.Errorf("PeerOwner(connection our server answered and closed) = %v, %v; want not another process", o, err)
	}
}
