package fastpath

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}}, {"0-3", []int{0, 1, 2, 3}}, {"0-1,4,6-7", []int{0, 1, 4, 6, 7}},
	} {
		if got, err := parseCPUList(c.in); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "x", "3-1", "0-", "0-5000"} {
		if got, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", bad, got)
		}
	}
}

// TestTCPCloseLeavesAtOnce: closing an address's TCP server takes all its listeners out of the SO_REUSEPORT
// group at once, and only then waits for the queries being served, which are answered. A listener leaving
// the group resets the connections queued on it; closed one after the other, each once the one before had
// served its connections, they reset them at as many instants (a surge rollout's TCP client lost queries at
// each), and the ones still open meanwhile took on connections to reset.
func TestTCPCloseLeavesAtOnce(t *testing.T) {
	if !testenv.KernelAtLeast(6, 1) {
		t.Skip("SO_INCOMING_CPU steers within a reuseport group from Linux 6.1: the held query's listener cannot be chosen")
	}
	// The port: a placeholder's, in the group until the server's listeners are open.
	pool := listenlimit.NewPool(listenlimit.Limits{PerSource: 10, Total: 10})
	hold, err := pool.Open("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := hold.Addr().(*net.TCPAddr).AddrPort()
	entered, release := make(chan struct{}), make(chan struct{})
	block := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		close(entered)
		<-release
		m := new(dns.Msg)
		m.SetReply(r)
		w.WriteMsg(m)
	})
	// The held query's connection is steered to the first listener: the client dials from a thread pinned to
	// cpu, the first listener's CPU, and the others' CPUs do not exist. So closing the servers in order would
	// leave the others open while the first waits for its query.
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for !set.IsSet(cpu) {
		cpu++
	}
	s := &tcpServer{addr: addr, srv: &dnsserver.Server{}}
	if err := s.listen(pool, []int{cpu, cpu + 1000, cpu + 2000}, block); err != nil {
		t.Fatal(err)
	}
	hold.Close()
	if n := listeningOn(t, addr.Port()); n != 3 {
		t.Fatalf("%d listeners on port %d, want the server's 3", n, addr.Port())
	}

	// A query in flight on the first, its handler held.
	answered := make(chan error, 1)
	go func() {
		c, err := dialFromCPU(cpu, addr)
		if err != nil {
			answered <- err
			return
		}
		defer c.Close()
		m := new(dns.Msg)
		m.SetQuestion("held.example.", dns.TypeA)
		dc := &dns.Conn{Conn: c}
		if err = dc.WriteMsg(m); err == nil {
			_, err = dc.ReadMsg()
		}
		answered <- err
	}()
	select {
	case <-entered:
	case err := <-answered:
		t.Fatalf("the query never reached the handler: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the query never reached the handler")
	}

	closed := make(chan struct{})
	go func() { s.closeWithin(time.Hour); close(closed) }()
	testenv.Eventually(t, 10*time.Second, "every listener closed while a query is being served", func() bool {
		return listeningOn(t, addr.Port()) == 0
	})
	select {
	case <-closed:
		t.Fatal("close returned before the query being served was answered")
	default:
	}
	close(release)
	select {
	case err := <-answered:
		if err != nil {
			t.Errorf("the query in flight at the close: %v, want its answer", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the query in flight at the close was never answered")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return once the query was answered")
	}
}

// dialFromCPU connects to addr from a thread pinned to cpu: the kernel handles the SYN there (loopback), and
// gives the connection to the listener whose SO_INCOMING_CPU is cpu.
func dialFromCPU(cpu int, addr netip.AddrPort) (net.Conn, error) {
	type dialed struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, and its affinity with it
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			ch <- dialed{nil, err}
			return
		}
		c, err := net.DialTimeout("tcp", addr.String(), 10*time.Second)
		ch <- dialed{c, err}
	}()
	d := <-ch
	return d.c, d.err
}

// listeningOn counts the TCP sockets listening on 127.0.0.1:port in this network namespace, as the kernel
// lists them.
func listeningOn(t *testing.T, port uint16) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == local && f[3] == "0A" { // TCP_LISTEN
			n++
		}
	}
	return n
}
