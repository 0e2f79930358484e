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

// TestOwnsPeer: a connection to this process's own listener is owned (once accepted); one to a listener of
// another process is not.
func TestOwnsPeer(t *testing.T) {
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
	if own, err := OwnsPeer(c); !own || err != nil {
		t.Errorf("OwnsPeer(connection to our own listener) = %v, %v; want true", own, err)
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
	for range 100 { // accepted by the other process at some point: before, no process has it either
		own, err := OwnsPeer(oc)
		if own || err != nil {
			t.Fatalf("OwnsPeer(connection to another process's listener) = %v, %v; want false", own, err)
		}
	}
}
