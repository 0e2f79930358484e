package nft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/mdlayher/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ReasonOverrun is the trigger reason after events may have been lost (socket overrun, ENOBUFS, a failed
// socket): the caller cannot know what changed and must do a full pass.
const ReasonOverrun = "overrun"

// WatchOption configures [Watch].
type WatchOption func(*watchOptions)

type watchOptions struct {
	own        []*Conn
	readBuffer int
	retryMax   time.Duration
}

// IgnoreConn makes Watch ignore transactions committed through c. The kernel stamps each notification with
// the netlink port of the socket that caused it; this works whatever pid namespace we run in, where the
// writer pid the kernel reports (a global thread id) would not match ours.
func IgnoreConn(c *Conn) WatchOption { return func(o *watchOptions) { o.own = append(o.own, c) } }

// WithReadBuffer sets the socket's receive buffer. Larger makes an overrun rarer; tests make it tiny.
func WithReadBuffer(bytes int) WatchOption { return func(o *watchOptions) { o.readBuffer = bytes } }

// Watch subscribes to nftables notifications and calls trigger for every transaction that may affect our
// table: any change inside it, the deletion of any table (`nft flush ruleset` deletes them all), a base chain
// added or removed elsewhere (a drop policy may have appeared), and set element changes it cannot attribute.
// Transactions committed by this process (see [IgnoreConn]) are not triggers, so our own Apply never causes
// a storm. When events may have been lost (ENOBUFS, socket error) it resubscribes and calls
// trigger([ReasonOverrun]). trigger runs on Watch's goroutine and must not block (a channel of one with a
// non-blocking send is the intended use). Watch returns nil when ctx is done, or an error if it cannot
// subscribe at all at start.
//
// It reads the netlink messages itself rather than through google/nftables' Monitor, whose action and object
// filters are broken in v0.3.0 (`flags&1<<type` binds as `(flags&1)<<type`) and which parses every foreign
// rule it sees; all we need is the message type, the table name and, for generations, the writer.
func Watch(ctx context.Context, log *zap.Logger, trigger func(reason string), opts ...WatchOption) error {
	o := watchOptions{readBuffer: 4 << 20, retryMax: 30 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	log = log.Named("nft-watch")
	nl, err := subscribe(o.readBuffer)
	if err != nil {
		return fmt.Errorf("subscribe to nftables events: %w", err)
	}
	for {
		err := receive(ctx, nl, log, trigger, o.own)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("nftables events may have been lost, resubscribing", zap.Error(err))
		if nl = resubscribe(ctx, log, o); nl == nil {
			return nil
		}
		trigger(ReasonOverrun)
	}
}

func subscribe(readBuffer int) (*netlink.Conn, error) {
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("dial netfilter netlink: %w", err)
	}
	if err := nl.SetReadBuffer(readBuffer); err != nil {
		_ = nl.Close()
		return nil, fmt.Errorf("set read buffer %d: %w", readBuffer, err)
	}
	if err := nl.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		_ = nl.Close()
		return nil, fmt.Errorf("join NFNLGRP_NFTABLES: %w", err)
	}
	return nl, nil
}

// resubscribe retries with backoff until it succeeds (the new socket) or ctx is done (nil).
func resubscribe(ctx context.Context, log *zap.Logger, o watchOptions) *netlink.Conn {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, o.retryMax) {
		nl, err := subscribe(o.readBuffer)
		if err == nil {
			return nl
		}
		log.Warn("resubscribe to nftables events", zap.Error(err), zap.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// receive reads until the socket fails or ctx is done, collecting the relevant changes of each transaction
// and triggering once per transaction when its generation message arrives.
func receive(ctx context.Context, nl *netlink.Conn, log *zap.Logger, trigger func(string), own []*Conn) error {
	stop := context.AfterFunc(ctx, func() { _ = nl.Close() })
	defer stop()
	defer nl.Close()
	var reasons []string
	for {
		msgs, err := nl.Receive()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				return fmt.Errorf("socket overrun: %w", err)
			}
			return fmt.Errorf("receive nftables event: %w", err)
		}
		for _, m := range msgs {
			ev, ok := parseEvent(m)
			if !ok {
				continue
			}
			if ev.typ != unix.NFT_MSG_NEWGEN {
				if r, ok := relevant(ev); ok {
					reasons = append(reasons, r)
				}
				continue
			}
			if len(reasons) > 0 && !isOwn(ev, own) {
				reason := reasons[0]
				if len(reasons) > 1 {
					reason += fmt.Sprintf(" (+%d more)", len(reasons)-1)
				}
				reason += fmt.Sprintf(" by %s[%d]", ev.comm, ev.pid)
				log.Debug("nftables change", zap.String("reason", reason))
				trigger(reason)
			}
			reasons = reasons[:0]
		}
	}
}

// isOwn reports whether a transaction was committed by this process: through one of the ignored
// connections, or by one of our threads as seen from our pid namespace.
func isOwn(gen event, own []*Conn) bool {
	for _, c := range own {
		if p := c.PortID(); p != 0 && p == gen.portID {
			return true
		}
	}
	if gen.pid == 0 {
		return false
	}
	if int(gen.pid) == os.Getpid() {
		return true
	}
	// The kernel reports the committing thread's id, not the process id.
	_, err := os.Stat("/proc/self/task/" + strconv.Itoa(int(gen.pid)))
	return err == nil
}

// event is what Watch needs from one nftables notification.
type event struct {
	typ       uint8 // NFT_MSG_*
	family    uint8
	table     string // "" when the message carries none
	baseChain bool   // a chain with a hook
	portID    uint32 // netlink port of the writer's socket
	pid       uint32 // NEWGEN: the writer's thread id
	comm      string // NEWGEN: the writer's command name
}

// Attribute numbers (linux/netfilter/nf_tables.h). The table name is attribute 1 in every object message.
const (
	attrTable     = 1
	attrChainHook = 4 // NFTA_CHAIN_HOOK
	attrGenPID    = 2 // NFTA_GEN_PROC_PID
	attrGenName   = 3 // NFTA_GEN_PROC_NAME
)

func parseEvent(m netlink.Message) (event, bool) {
	if uint16(m.Header.Type)>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
		return event{}, false
	}
	ev := event{typ: uint8(m.Header.Type & 0xff), family: m.Data[0], portID: m.Header.PID}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return ev, true // unparsable: keep the type, relevant() decides conservatively
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch {
		case ev.typ == unix.NFT_MSG_NEWGEN && ad.Type() == attrGenPID:
			ev.pid = ad.Uint32()
		case ev.typ == unix.NFT_MSG_NEWGEN && ad.Type() == attrGenName:
			ev.comm = ad.String()
		case ev.typ != unix.NFT_MSG_NEWGEN && ad.Type() == attrTable:
			ev.table = ad.String()
		case (ev.typ == unix.NFT_MSG_NEWCHAIN || ev.typ == unix.NFT_MSG_DELCHAIN) && ad.Type() == attrChainHook:
			ev.baseChain = true
		}
	}
	return ev, true
}

var msgNames = map[uint8]string{
	unix.NFT_MSG_NEWTABLE: "add table", unix.NFT_MSG_DELTABLE: "delete table",
	unix.NFT_MSG_NEWCHAIN: "add chain", unix.NFT_MSG_DELCHAIN: "delete chain",
	unix.NFT_MSG_NEWRULE: "add rule", unix.NFT_MSG_DELRULE: "delete rule",
	unix.NFT_MSG_NEWSET: "add set", unix.NFT_MSG_DELSET: "delete set",
	unix.NFT_MSG_NEWSETELEM: "add element", unix.NFT_MSG_DELSETELEM: "delete element",
}

// relevant says whether a change may affect our table or what we report about others, and describes it.
func relevant(ev event) (string, bool) {
	name, known := msgNames[ev.typ]
	if !known {
		return "", false // objects, flowtables, generations
	}
	where := fmt.Sprintf("%s %s", familyName(ev.family), ev.table)
	switch {
	case ev.table == TableName && ev.family == unix.NFPROTO_INET:
		return name + " in " + where, true
	case ev.typ == unix.NFT_MSG_DELTABLE:
		return name + " " + where, true
	case ev.baseChain:
		return name + " (base chain) in " + where, true
	case ev.table == "" && (ev.typ == unix.NFT_MSG_NEWSETELEM || ev.typ == unix.NFT_MSG_DELSETELEM):
		return name + " in an unnamed table", true
	}
	return "", false
}

func familyName(f uint8) string {
	switch f {
	case unix.NFPROTO_INET:
		return "inet"
	case unix.NFPROTO_IPV4:
		return "ip"
	case unix.NFPROTO_IPV6:
		return "ip6"
	case unix.NFPROTO_ARP:
		return "arp"
	case unix.NFPROTO_BRIDGE:
		return "bridge"
	case unix.NFPROTO_NETDEV:
		return "netdev"
	}
	return "family" + strconv.Itoa(int(f))
}
