package memcheck

import (
	"os"
	"path/filepath"
	"testing"

	coredns "github.com/coredns/coredns/core/dnsserver"

	"github.com/nodelocaldns/nodelocaldns/internal/clients"
	"github.com/nodelocaldns/nodelocaldns/internal/connlimit"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name, self string
		files      map[string]string
		want       int64
		wantFile   string
	}{
		{"v2 namespaced", "0::/\n", map[string]string{"memory.max": "209715200\n"}, 200 << 20, "memory.max"},
		{"v2 path followed", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "536870912\n", "memory.max": "max\n"}, 512 << 20, "kubepods/pod1/c1/memory.max"},
		{"v2 no limit", "0::/\n", map[string]string{"memory.max": "max\n"}, 0, "memory.max"},
		{"v1", "4:memory:/process_api/x\n0::/\n", map[string]string{"memory/process_api/x/memory.limit_in_bytes": "104857600\n"}, 100 << 20, "memory/process_api/x/memory.limit_in_bytes"},
		{"v1 unlimited", "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, "memory/memory.limit_in_bytes"},
		{"v1 joined controllers", "3:cpuacct,memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "1048576\n"}, 1 << 20, "memory/memory.limit_in_bytes"},
		{"none mounted", "0::/\n", nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, "proc-self-cgroup"), tc.self)
			for f, c := range tc.files {
				write(t, filepath.Join(root, "cg", f), c)
			}
			got, file, err := CgroupLimit(filepath.Join(root, "cg"), filepath.Join(root, "proc-self-cgroup"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantFile != "" {
				tc.wantFile = filepath.Join(root, "cg", tc.wantFile)
			}
			if got != tc.want || file != tc.wantFile {
				t.Errorf("limit %d from %q, want %d from %q", got, file, tc.want, tc.wantFile)
			}
		})
	}
	root := t.TempDir()
	write(t, filepath.Join(root, "self"), "0::/\n")
	write(t, filepath.Join(root, "memory.max"), "lots\n")
	if _, _, err := CgroupLimit(root, filepath.Join(root, "self")); err == nil {
		t.Error("a limit that is not a number was accepted")
	}
}

// The standard Corefile's four caches, as deploy/ ships them: 9984+9984 in the cluster domain's block, the
// default (10000 rounded to 9984) in the three others.
const standard = `cluster.local:53 {
    cache {
            success 9984 30
            denial 9984 5
    }
    forward . 10.0.0.10
}
in-addr.arpa:53 {
    cache 30
}
ip6.arpa:53 {
    cache 30 {
        success 100
    }
}
.:53 {
    cache
    forward . /etc/resolv.conf
}
`

func TestCaches(t *testing.T) {
	got, err := Caches([]byte(standard), coredns.Directives)
	if err != nil {
		t.Fatal(err)
	}
	want := []Cache{{Line: 2, Success: 9984, Denial: 9984}, {Line: 9, Success: 9984, Denial: 9984},
		{Line: 12, Success: 1024, Denial: 9984}, {Line: 17, Success: 9984, Denial: 9984}}
	if len(got) != len(want) {
		t.Fatalf("caches %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cache %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestEstimate(t *testing.T) {
	caches, err := Caches([]byte(standard), coredns.Directives)
	if err != nil {
		t.Fatal(err)
	}
	e := New(caches, 200<<20)
	if e.Entries != 3*19968+1024+9984 {
		t.Errorf("entries %d", e.Entries)
	}
	if e.Fits() {
		t.Errorf("%s worst case fits 200Mi; four full caches do not", MiB(e.WorstCase))
	}
	if e.WorstCase-New(caches[1:], 0).WorstCase <= ClientsWorstCase(4)-ClientsWorstCase(3) {
		t.Errorf("a cache adds %s: want its entries, its store and its readers' per-client rings (%s)",
			MiB(e.WorstCase-New(caches[1:], 0).WorstCase), MiB(ClientsWorstCase(4)-ClientsWorstCase(3)))
	}
	if ClientsWorstCase(1) < clients.TableBytes {
		t.Errorf("per-client accounting counted for %d bytes; its table alone takes %d", ClientsWorstCase(1), clients.TableBytes)
	}
	if !New(caches, 0).Fits() || !New(caches, e.WorstCase).Fits() {
		t.Error("no limit, or a limit equal to the worst case, does not fit")
	}
}

// The TCP connections CoreDNS may hold, and those of the agent's own listeners, are counted: a Corefile without
// caches is Baseline and their caps.
func TestEstimateCountsTCPConnections(t *testing.T) {
	e := New(nil, 0)
	if ListenersWorstCase() < 3*256*16<<10 {
		t.Errorf("listeners counted for %s; want at least health, the agent's metrics and CoreDNS's, 256 of 16 KiB each", MiB(ListenersWorstCase()))
	}
	if e.WorstCase != Baseline+TCPWorstCase+ListenersWorstCase() || TCPWorstCase < 1000*7<<10 {
		t.Errorf("worst case of no cache %s, TCP connections %s; want Baseline + TCP, TCP at least 1000 of 7 KiB",
			MiB(e.WorstCase), MiB(TCPWorstCase))
	}
}

// TestTCPWorstCaseIsConnlimits: the constant is what connlimit's default caps hold at their worst.
func TestTCPWorstCaseIsConnlimits(t *testing.T) {
	if got := connlimit.Default().WorstCaseBytes(); TCPWorstCase != got {
		t.Errorf("TCPWorstCase = %d, connlimit.Default().WorstCaseBytes() = %d", TCPWorstCase, got)
	}
}
