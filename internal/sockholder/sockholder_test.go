package sockholder

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestExplainNamesThisProcess: a real listener of this process holds a port (without SO_REUSEPORT, as a
// squatter would); binding it again fails, and the explained error names the port, the socket and this
// process, read from the real /proc.
func TestExplainNamesThisProcess(t *testing.T) {
	for _, c := range []struct{ netw, addr string }{{"tcp", "127.0.0.1:0"}, {"tcp", "[::1]:0"}, {"udp", "127.0.0.1:0"}} {
		t.Run(c.netw+" "+c.addr, func(t *testing.T) {
			var held string
			if c.netw == "tcp" {
				ln, err := net.Listen(c.netw, c.addr)
				if err != nil {
					t.Skipf("listen %s: %v", c.addr, err)
				}
				defer ln.Close()
				held = ln.Addr().String()
				_, err = net.Listen(c.netw, held)
				checkExplained(t, err, "tcp", held)
			} else {
				pc, err := net.ListenPacket(c.netw, c.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer pc.Close()
				held = pc.LocalAddr().String()
				_, err = net.ListenPacket(c.netw, held)
				checkExplained(t, err, "udp", held)
			}
		})
	}
}

func checkExplained(t *testing.T, err error, proto, held string) {
	t.Helper()
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second bind of %s: %v, want EADDRINUSE", held, err)
	}
	ex := Explain(err)
	var iu *InUseError
	if !errors.As(ex, &iu) || !errors.Is(ex, syscall.EADDRINUSE) {
		t.Fatalf("Explain(%v) = %v, want an InUseError that still is EADDRINUSE", err, ex)
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	_, port, _ := net.SplitHostPort(held)
	for _, want := range []string{proto + " port " + port, "pid " + strconv.Itoa(os.Getpid()) + " (" + strings.TrimSpace(string(comm)) + ")", "uid " + strconv.Itoa(os.Getuid())} {
		if !strings.Contains(ex.Error(), want) {
			t.Errorf("explained error lacks %q:\n%s", want, ex)
		}
	}
	if strings.Contains(ex.Error(), "outside this pid namespace") {
		t.Errorf("a holder in this process is said to be hidden:\n%s", ex)
	}
}

// TestHiddenHolder: a socket in /proc/net whose inode no visible process has open (the holder is in another pid
// namespace, as for an agent pod without hostPID) is named by its socket, with what finds it on the node. The
// table is the kernel's format, copied from /proc/net/tcp of a node where a process listened on 0.0.0.0:8080.
func TestHiddenHolder(t *testing.T) {
	proc := t.TempDir()
	os.MkdirAll(filepath.Join(proc, "net"), 0o755)
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 424242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 100 0 0 10 0
`
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the table above is a little-endian machine's")
	}
	os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(tcp), 0o644)
	hs := Find(proc, "tcp", netip.MustParseAddrPort("169.254.20.10:8080"))
	if len(hs) != 1 || hs[0].Inode != 424242 || hs[0].UID != 1000 || hs[0].Local != netip.MustParseAddrPort("0.0.0.0:8080") || len(hs[0].Procs) != 0 {
		t.Fatalf("Find = %+v, want the one wildcard socket on 8080, of uid 1000, inode 424242, no process", hs)
	}
	msg := (&InUseError{Err: errors.New("listen tcp 169.254.20.10:8080: bind: address already in use"), Proto: "tcp",
		Addr: netip.MustParseAddrPort("169.254.20.10:8080"), Holders: hs}).Error()
	for _, want := range []string{"tcp port 8080 is held by a socket on 0.0.0.0:8080 (uid 1000, inode 424242) of no process visible here",
		"outside this pid namespace", "ss -ltnp 'sport = :8080'"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}
