package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// server is one DNS server under test, pinned to serverCPU.
type server struct {
	name      string
	ip        string
	cmd       *exec.Cmd
	metrics   string   // URL of CoreDNS's prometheus plugin; "" for unbound
	idle      procStat // after start-up, before any query
	resilient bool     // runs the resilient configuration (resilient.go)
	mixed     bool     // runs the mixed workload
	miss      bool     // runs the miss workload
}

// variant is a nodelocaldns configuration: the environment it runs with.
type variant struct {
	name      string
	pgo       string // "" the default build (go build applies cmd/nodelocaldns/default.pgo), else go build's -pgo value
	tags      string // go build's -tags: "corednscache" links CoreDNS's cache plugin instead of ours
	bin       string // a prebuilt binary instead (-compare)
	env       []string
	hint      string                   // what differs, for the table's legend
	mixed     bool                     // also run the mixed workload
	miss      bool                     // also run the miss workload
	corefile  func(base string) string // an edit of the standard Corefile (the resilient rows, profiling)
	resilient bool                     // a row of the resilient workload
}

// goRuntimeEnv are the variables that change the Go runtime's behaviour; the servers start without any of them
// from the bench's own environment, so each variant's env alone decides.
var goRuntimeEnv = []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG", "NODELOCALDNS_TUNING", "NODELOCALDNS_FASTPATH"}

func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, g := range goRuntimeEnv {
			keep = keep && k != g
		}
		if keep {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// startNodeLocalDNS runs the real binary with node-cache's flags and the standard manifest's Corefile. The
// listen IPs are loopback aliases (-setupinterface=false -setupiptables=false), so that several instances can
// run side by side; the Corefile's prometheus port is the only thing changed, for the same reason.
func startNodeLocalDNS(bin, work string, v variant, n int, logTo io.Writer) (*server, error) {
	ip, ip2 := fmt.Sprintf("169.254.20.%d", 10+n), fmt.Sprintf("10.96.0.%d", 10+n)
	for _, a := range []string{ip, ip2} {
		if err := sh("ip", "addr", "add", a+"/32", "dev", "lo"); err != nil {
			return nil, err
		}
	}
	// One level below work: the agent's config watcher also watches the parent of the Corefile's directory (to
	// see it replaced), and work is where dnsperf writes every query's latency (load.go). Beside it, each of
	// dnsperf's writes woke every agent's watcher: 7% of an agent's CPU per cache hit, which unbound never paid.
	dir := filepath.Join(work, "servers", v.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	promPort := strconv.Itoa(9253 + n)
	base := strings.ReplaceAll(harness.StandardCorefile(ip, ip2, domain), "prometheus :9253", "prometheus "+ip+":"+promPort)
	if v.corefile != nil {
		base = v.corefile(base)
	}
	if err := os.WriteFile(filepath.Join(dir, "Corefile.base"), []byte(base), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", "-c", serverCPU, bin, "-localip", ip+","+ip2,
		"-setupinterface=false", "-setupiptables=false", "-upstreamsvc", "kube-dns-upstream",
		"-basecorefile", filepath.Join(dir, "Corefile.base"), "-conf", filepath.Join(dir, "Corefile"),
		"-metrics-listen-address", fmt.Sprintf("127.0.0.1:%d", 9353+n), "-health-port", "8080")
	cmd.Env = cleanEnv(append([]string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + upstreamIP}, v.env...))
	s := &server{name: v.name, ip: ip, cmd: cmd, metrics: "http://" + ip + ":" + promPort + "/metrics", resilient: v.resilient,
		mixed: v.mixed, miss: v.miss}
	return s, s.start(logTo)
}

// unboundConf makes unbound a forwarding cache of the same size and TTL caps as the standard Corefile's
// cluster.local block: 9984 entries are about 4 MiB of message cache; TTLs capped at 30 s (5 s negative);
// one thread, as the servers share one core; upstream over TCP like the Corefile's force_tcp.
const unboundConf = `server:
  interface: %[1]s
  port: 53
  num-threads: 1
  do-daemonize: no
  chroot: ""
  username: ""
  directory: "%[2]s"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
  do-ip6: no
  access-control: 0.0.0.0/0 allow
  module-config: "iterator"
  do-not-query-localhost: no
  msg-cache-size: 4m
  rrset-cache-size: 8m
  cache-max-ttl: 30
  cache-max-negative-ttl: 5
  prefetch: no
  tcp-upstream: yes
  domain-insecure: "%[3]s"
forward-zone:
  name: "%[3]s."
  forward-addr: %[4]s
`

func startUnbound(work string, n int, logTo io.Writer, resilient bool) (*server, error) {
	ip := fmt.Sprintf("169.254.20.%d", 10+n)
	if err := sh("ip", "addr", "add", ip+"/32", "dev", "lo"); err != nil {
		return nil, err
	}
	name, text := unboundName, fmt.Sprintf(unboundConf, ip, work, domain, upstreamIP)
	if resilient {
		name, text = unboundName+resilientSuffix, strings.Replace(text, "  prefetch: no\n", unboundResilient, 1)
	}
	conf := filepath.Join(work, strings.ReplaceAll(name, " ", "-")+".conf")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	s := &server{name: name, ip: ip, resilient: resilient, mixed: !resilient, miss: true,
		cmd: exec.Command("taskset", "-c", serverCPU, "unbound", "-d", "-c", conf)}
	return s, s.start(logTo)
}

// start starts the process (taskset execs it, so the pid is the server's) and waits until it answers.
func (s *server) start(logTo io.Writer) error {
	s.cmd.Stdout, s.cmd.Stderr = logTo, logTo
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A name outside the workload, so that no workload name is cached before its warm-up.
		if _, err := harness.Lookup(s.ip+":53", "udp", "probe."+missZone, 200*time.Millisecond); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer on %s: %v", s.name, s.ip, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // let start-up allocations settle before the idle RSS
	var err error
	s.idle, err = s.stat()
	return err
}

// restart stops the server and starts the same command again: a fresh process, its high-water mark its own.
func (s *server) restart(logTo io.Writer) error {
	s.stop()
	c := exec.Command(s.cmd.Path, s.cmd.Args[1:]...)
	c.Args[0], c.Env = s.cmd.Args[0], s.cmd.Env
	s.cmd = c
	return s.start(logTo)
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// procStat is what /proc says about a server: CPU time in clock ticks (USER_HZ, 100 on Linux), in user space and
// in the kernel (system calls, and the softirq work, such as loopback delivery, done in its context), RSS and its
// high-water mark, and the anonymous part of the RSS (heap, stacks: what the process itself allocated, without
// the pages of its executable file, which instances of one binary share), all in KiB.
type procStat struct {
	user, sys      int64 // ticks
	rss, hwm, anon int64
}

func (s *server) stat() (procStat, error) {
	pid := s.cmd.Process.Pid
	var st procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// Fields after the command (which may contain spaces) start at state, field 3; utime and stime are 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stt, _ := strconv.ParseInt(f[12], 10, 64)
	st.user, st.sys = ut, stt
	sf, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	defer sf.Close()
	sc := bufio.NewScanner(sf)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			st.rss = kb
		case "VmHWM":
			st.hwm = kb
		case "RssAnon":
			st.anon = kb
		}
	}
	return st, sc.Err()
}

// cacheEntries sums coredns_cache_entries of the given type (success or denial) over the server's zones.
func (s *server) cacheEntries(typ string) (int64, error) {
	v, err := s.metricSum("coredns_cache_entries{", `type="`+typ+`"`)
	return int64(v), err
}

// metricSum sums the server's samples whose line starts with prefix and contains match; -1 for unbound.
func (s *server) metricSum(prefix, match string) (float64, error) {
	if s.metrics == "" {
		return -1, nil
	}
	resp, err := http.Get(s.metrics)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", s.name, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) && strings.Contains(line, match) {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			sum += v
		}
	}
	return sum, sc.Err()
}

// receives is the fast path's receive calls and datagrams received so far (internal/fastpath/batch.go).
func (s *server) receives() (calls, datagrams float64) {
	calls, _ = s.metricSum("nodelocaldns_fastpath_receives_total ", "")
	datagrams, _ = s.metricSum("nodelocaldns_fastpath_received_datagrams_total ", "")
	return calls, datagrams
}
