package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/net/ipv4"
)

// The minimal responder is the reference for what serving a datagram through Go's netpoller costs, without any
// DNS work: a Go program that receives and sends in batches through golang.org/x/net's ReadBatch and
// WriteBatch (recvmmsg and sendmmsg on a socket in the runtime's poller) and answers every query with one A
// record, built in place: the question copied, no lookup, no cache, no parsing beyond the question's end. It
// is this bench's own binary, re-executed with responderEnv set, pinned to the servers' CPU like the others.
const (
	responderName = "minimal responder"
	responderEnv  = "BENCH_SERVE_RESPONDER" // the address to answer on
	responderHint = "this bench's own Go responder: x/net ReadBatch/WriteBatch, every name answered with one A record, no lookup (the netpoller path's floor)"
)

// startResponder re-executes this binary as the minimal responder on its own address.
func startResponder(n int, logTo io.Writer) (*server, error) {
	ip := fmt.Sprintf("169.254.20.%d", 10+n)
	if err := sh("ip", "addr", "add", ip+"/32", "dev", "lo"); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", "-c", serverCPU, exe)
	cmd.Env = cleanEnv([]string{responderEnv + "=" + ip})
	s := &server{name: responderName, ip: ip, cmd: cmd, mixed: true, miss: true}
	return s, s.start(logTo)
}

// serveResponder is the responder's process: it answers on ip:53 until killed.
func serveResponder(ip string) error {
	c, err := net.ListenPacket("udp4", ip+":53")
	if err != nil {
		return err
	}
	pc := ipv4.NewPacketConn(c)
	const batch = 32
	in, out := make([]ipv4.Message, batch), make([]ipv4.Message, batch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, 512)}
		out[i].Buffers = [][]byte{make([]byte, 0, 512+16)}
	}
	for {
		n, err := pc.ReadBatch(in, 0)
		if err != nil {
			return err
		}
		k := 0
		for _, m := range in[:n] {
			if a := answerA(out[k].Buffers[0][:0], m.Buffers[0][:m.N]); a != nil {
				out[k].Buffers[0], out[k].Addr = a, m.Addr
				k++
			}
		}
		for sent := 0; sent < k; {
			w, err := pc.WriteBatch(out[sent:k], 0)
			if err != nil && err != syscall.EAGAIN {
				break // as a UDP server does: the answer is lost, the next ones go
			}
			sent += max(w, 1)
		}
	}
}

// answerA appends to out the answer to query q with one A record, 192.0.2.1 with a TTL of 30 s, pointing at
// the question's name; nil when q is not a query with one question.
func answerA(out, q []byte) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	end := 12
	for end < len(q) && q[end] != 0 {
		if q[end]&0xC0 != 0 {
			return nil
		}
		end += 1 + int(q[end])
	}
	end += 1 + 4 // the root label, type and class
	if end > len(q) {
		return nil
	}
	out = append(out, q[:end]...)
	out[2] |= 0x80                                                            // QR
	out[3] = 0x80                                                             // RA, NOERROR
	binary.BigEndian.PutUint16(out[6:], 1)                                    // ANCOUNT
	binary.BigEndian.PutUint32(out[8:], 0)                                    // NSCOUNT, ARCOUNT
	return append(out, 0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 192, 0, 2, 1) // name at 12, A, IN, TTL, RDATA
}
