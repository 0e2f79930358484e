// Package nlsock is the netlink socket to nftables that every part of internal/nft writes and reads through:
// google/nftables' lasting socket, plus what v0.3.0 cannot do (decode `ct original ...` in a rule dump, send a
// raw batch such as a NEWTABLE with flags, drop stale acknowledgements after a failed batch), each request
// under a deadline, and the raw messages themselves (msg.go). What a socket may change is its caller's
// (nft/nftconn: our tables; nft/foreign: node-cache's rules; preflight: nothing, its batches are aborted).
//
// May touch: the nftables netlink sockets its callers open through it.
package nlsock

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// RequestTimeout bounds every request on our sockets: the kernel answers nftables requests in microseconds to
// milliseconds (a dump of our table, one batch), so a request unanswered for this long means the socket is
// wedged, and the caller gets an error it can count and retry instead of a loop that hangs.
const RequestTimeout = 5 * time.Second

// Socket is one lasting netlink socket to nftables, open until CloseLasting.
type Socket struct {
	*nftables.Conn
	nl *netlink.Conn // the library's lasting socket
}

// Open dials a lasting socket; its netlink port id is PortID (the kernel stamps it on the notifications
// the socket's transactions cause).
func Open() (*Socket, error) {
	s := &Socket{}
	c, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(func(nc *netlink.Conn) error {
		// Called for every socket the library dials; ours is the lasting one, dialled first. Later ones
		// (transient, after CloseLasting) must not replace it.
		if s.nl == nil {
			s.nl = nc
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	s.Conn = c
	return s, nil
}

// PortID is the socket's netlink port id.
func (s *Socket) PortID() uint32 { return s.nl.PID() }

// SetDeadline bounds the next requests on the socket (see RequestTimeout).
func (s *Socket) SetDeadline(t time.Time) error { return s.nl.SetDeadline(t) }

// SendBatch sends msgs between a batch's begin and end as one transaction and reads its acknowledgement.
func (s *Socket) SendBatch(msgs ...netlink.Message) error {
	batch := append(append([]netlink.Message{BatchMark(unix.NFNL_MSG_BATCH_BEGIN)}, msgs...), BatchMark(unix.NFNL_MSG_BATCH_END))
	if _, err := s.nl.SendMessages(batch); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if _, err := s.nl.Receive(); err != nil {
		return err
	}
	return nil
}

// Discard drops whatever the socket still holds after a failed batch (acknowledgements the library stopped
// reading), so the next request reads its own answer.
func (s *Socket) Discard() {
	if s.nl == nil {
		return
	}
	s.nl.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	defer s.nl.SetReadDeadline(time.Time{})
	for range 64 {
		if _, err := s.nl.Receive(); err != nil && !isAck(err) {
			return
		}
	}
}

// isAck tells a stale error acknowledgement (a netlink OpError) from the deadline ending the drain.
func isAck(err error) bool {
	var oe *netlink.OpError
	return err != nil && errors.As(err, &oe) && !oe.Timeout()
}

// Nfgenmsg is the nfgenmsg header of an nftables message: family, version 0, resource id.
func Nfgenmsg(family uint8, resID uint16) []byte {
	return []byte{family, unix.NFNETLINK_V0, byte(resID >> 8), byte(resID)}
}

// BatchMark is a batch's begin or end message (NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END).
func BatchMark(t int) netlink.Message {
	return netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(t), Flags: netlink.Request},
		Data: Nfgenmsg(unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)}
}
