package sockholder

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Socket states in /proc/net/{tcp,udp}: a listening TCP socket, and an unconnected UDP one (TCP_CLOSE).
const (
	stateListen = "0A"
	stateClose  = "07"
)

// Find lists the sockets under proc (the proc filesystem's root) that hold proto's port of addr: bound to it on
// that address, or on the wildcard address of either family (an IPv6 wildcard socket takes IPv4 too unless it is
// IPV6_V6ONLY, which /proc does not say), each with the processes that have it open.
func Find(proc, proto string, addr netip.AddrPort) []Holder {
	state := stateListen
	if proto == "udp" {
		state = stateClose
	}
	var hs []Holder
	for _, f := range []string{proto, proto + "6"} {
		for _, e := range readTable(filepath.Join(proc, "net", f)) {
			if e.state == state && e.local.Port() == addr.Port() && overlaps(e.local.Addr(), addr.Addr()) {
				hs = append(hs, Holder{Local: e.local, UID: e.uid, Inode: e.inode})
			}
		}
	}
	if len(hs) == 0 {
		return nil
	}
	byInode := map[uint64]*Holder{}
	for i := range hs {
		byInode[hs[i].Inode] = &hs[i]
	}
	scanFDs(proc, byInode)
	return hs
}

func overlaps(a, b netip.Addr) bool {
	return a == b || a.IsUnspecified() || b.IsUnspecified() || a.Unmap() == b.Unmap()
}

// entry is one socket of a /proc/net table.
type entry struct {
	local, remote netip.AddrPort
	state         string // hex, as the kernel prints it
	uid           int
	inode         uint64 // 0 for a socket no file refers to (not yet accepted, or closing)
}

// readTable parses one /proc/net table. An unreadable table has no sockets.
func readTable(path string) []entry {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var es []entry
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		local, ok1 := parseHexAddrPort(fs[1])
		remote, ok2 := parseHexAddrPort(fs[2])
		uid, err1 := strconv.Atoi(fs[7])
		inode, err2 := strconv.ParseUint(fs[9], 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			continue
		}
		es = append(es, entry{local: local, remote: remote, state: fs[3], uid: uid, inode: inode})
	}
	return es
}

// parseHexAddrPort reads "0100007F:0035" (IPv4) or 32 hex digits and a port (IPv6). The kernel prints each
// 32-bit word of the address as a number in host byte order (so 127.0.0.1 reads 0100007F on little-endian
// machines), and the port as a number.
func parseHexAddrPort(s string) (netip.AddrPort, bool) {
	h, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), true
}

// scanFDs adds to each holder the processes under proc with a descriptor on its socket ("socket:[inode]").
// Processes whose fd directory cannot be read (another user's, or with capabilities we lack) are skipped.
func scanFDs(proc string, byInode map[uint64]*Holder) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(proc, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		seen := map[uint64]bool{}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			n, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			inode, err := strconv.ParseUint(strings.TrimSuffix(n, "]"), 10, 64)
			if h := byInode[inode]; err == nil && h != nil && !seen[inode] {
				seen[inode] = true
				comm, _ := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
				h.Procs = append(h.Procs, Proc{PID: pid, Comm: strings.TrimSpace(string(comm))})
			}
		}
	}
}
