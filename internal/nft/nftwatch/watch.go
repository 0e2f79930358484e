package nftwatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
	"github.com/nodelocaldns/nodelocaldns/internal/nlwatch"
)

// Option configures [Watch].
type Option func(*watchOptions)

type watchOptions struct {
	own        []Writer
	tables     []string
	readBuffer int
	subscribed func()
}

// IgnoreConn makes Watch ignore transactions committed through c. The kernel stamps each notification with
// the netlink port of the socket that caused it; this works whatever pid namespace we run in, where the
// writer pid the kernel reports (a global thread id) would not match ours.
func IgnoreConn(c Writer) Option { return func(o *watchOptions) { o.own = append(o.own, c) } }

// WithReadBuffer sets the socket's receive buffer. Larger makes an overrun rarer; tests make it tiny.
func WithReadBuffer(bytes int) Option { return func(o *watchOptions) { o.readBuffer = bytes } }

// Tables names our tables (inet family), whose every change is a trigger. The default is [nft.TableName];
// an instance that owns `nodelocaldns-<n>` names it here.
func Tables(names ...string) Option {
	return func(o *watchOptions) { o.tables = append([]string(nil), names...) }
}

// OnSubscribed is called each time Watch has joined the notification group (at start and after each
// resubscription), before it reads: every transaction committed after it returns will be seen.
func OnSubscribed(f func()) Option { return func(o *watchOptions) { o.subscribed = f } }

// Watch subscribes to nftables notifications and calls trigger for every transaction that may affect our
// table or what we report about others: any change inside our tables, the deletion of any table (`nft flush
// ruleset` deletes them all), a base chain of another table added, deleted, or re-declared with another hook,
// priority or policy (a drop policy may have appeared or gone), and set element changes it cannot attribute.
// A base chain re-declared unchanged (kube-proxy and iptables-nft-restore do so on every sync) is no trigger,
// and rules and set elements of other tables are dropped by a socket filter before they reach us (see
// bpf.go): the work per foreign transaction does not grow with its size.
//
// Transactions committed by this process (see [IgnoreConn]) are not triggers, so our own Apply never causes
// a storm. When events may have been lost (ENOBUFS, socket error) it resubscribes and calls
// trigger([nlwatch.ReasonOverrun]), with internal/nlwatch's policy. trigger runs on Watch's goroutine and must not block (a channel of one with a
// non-blocking send is the intended use). Watch returns nil when ctx is done, or an error if it cannot
// subscribe at all at start.
//
// It reads the netlink datagrams itself into one reused buffer rather than through google/nftables' Monitor
// (whose filters are broken in v0.3.0 and which parses every foreign rule) or mdlayher's Receive (which peeks,
// then allocates a buffer and a message per notification).
func Watch(ctx context.Context, log *zap.Logger, trigger func(reason string), opts ...Option) error {
	o := watchOptions{tables: []string{nft.TableName}, readBuffer: 4 << 20}
	for _, opt := range opts {
		opt(&o)
	}
	log = log.Named("nft-watch")
	w := &watcher{log: log, trigger: trigger, own: o.own, globalPIDs: pidsAreGlobal(), buf: make([]byte, 64<<10),
		state: watchState{ours: o.tables}}
	return nlwatch.Run(ctx, log, nlwatch.DefaultBackoff(), trigger, func(ctx context.Context, up func()) error {
		nl, err := w.subscribe(o)
		if err != nil {
			return fmt.Errorf("subscribe to nftables events: %w", err)
		}
		up()
		return w.receive(ctx, nl)
	})
}

type watcher struct {
	log        *zap.Logger
	trigger    func(string)
	own        []Writer
	globalPIDs bool // pidsAreGlobal, read once
	buf        []byte
	state      watchState
	reasons    []string // the current transaction's relevant changes
}

// subscribe dials, filters, joins the group, then learns the base chains as they stand: a chain re-declared
// later is news only if it differs from this.
func (w *watcher) subscribe(o watchOptions) (*netlink.Conn, error) {
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("dial netfilter netlink: %w", err)
	}
	fail := func(err error) (*netlink.Conn, error) { _ = nl.Close(); return nil, err }
	if err := nl.SetReadBuffer(o.readBuffer); err != nil {
		return fail(fmt.Errorf("set read buffer %d: %w", o.readBuffer, err))
	}
	if n, err := attachFilter(nl, o.tables); err != nil {
		// Without the filter every foreign rule event reaches us: correct, only costlier.
		w.log.Warn("nftables socket filter unavailable; every foreign rule event will be received and skipped", zap.Error(err))
	} else if n < bpfMaxInsns/2 {
		w.log.Info("nftables socket filter shortened to fit the socket's option memory (net.core.optmem_max); longer transactions are received whole",
			zap.Int("instructions", n))
	}
	if err := nl.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		return fail(fmt.Errorf("join NFNLGRP_NFTABLES: %w", err))
	}
	chains, err := listBaseChains(o.tables)
	if err != nil {
		return fail(err)
	}
	w.state.chains = chains
	if o.subscribed != nil {
		o.subscribed()
	}
	return nl, nil
}

// minFilterInsns is the shortest filter worth attaching: a few messages of walk.
const minFilterInsns = 256

// attachFilter attaches the longest filter the socket accepts and returns its length. The kernel charges a
// socket filter to the socket's option memory (net.core.optmem_max): 20 KiB on kernels before 6.9, too small
// for the full 4096-instruction walk, which then fails with ENOMEM. Each halving walks half as many messages
// per datagram; a datagram longer than the walk is delivered whole, so a shorter filter costs CPU, never events.
func attachFilter(nl *netlink.Conn, tables []string) (int, error) {
	rc, err := nl.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("attach socket filter: %w", err)
	}
	for budget := bpfMaxInsns; ; budget /= 2 {
		prog, err := foreignRuleFilter(tables, budget)
		if err != nil {
			return 0, err
		}
		var serr error
		err = rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
				&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
		})
		switch err = cmp.Or(err, serr); {
		case err == nil:
			return len(prog), nil
		case errors.Is(err, unix.ENOMEM) && budget/2 >= minFilterInsns:
			continue
		default:
			return 0, fmt.Errorf("attach socket filter (%d instructions): %w", len(prog), err)
		}
	}
}

// listBaseChains dumps the chains once (no rules) and keeps the base chains of tables other than ours. The dump
// runs on a socket of its own, with the same deadline as every request on ours (nlsock.RequestTimeout).
func listBaseChains(ours []string) (map[chainKey]chainHook, error) {
	c, err := nftables.New(nftables.WithSockOptions(func(nc *netlink.Conn) error {
		return nc.SetDeadline(time.Now().Add(nlsock.RequestTimeout))
	}))
	if err != nil {
		return nil, fmt.Errorf("open nftables reader: %w", err)
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	out := map[chainKey]chainHook{}
	for _, ch := range chains {
		if ch.Table == nil || ch.Hooknum == nil || (ch.Table.Family == nftables.TableFamilyINet && slices.Contains(ours, ch.Table.Name)) {
			continue
		}
		h := chainHook{hook: uint32(*ch.Hooknum)}
		if ch.Priority != nil {
			h.priority = uint32(*ch.Priority)
		}
		if ch.Policy != nil {
			h.policy, h.hasPolicy = uint32(*ch.Policy), true
		}
		out[chainKey{family: uint8(ch.Table.Family), table: ch.Table.Name, chain: ch.Name}] = h
	}
	return out, nil
}

// receive reads datagrams until the socket fails or ctx is done, collecting the relevant changes of each
// transaction and triggering once per transaction when its generation message arrives.
func (w *watcher) receive(ctx context.Context, nl *netlink.Conn) error {
	stop := context.AfterFunc(ctx, func() { _ = nl.Close() })
	defer stop()
	defer nl.Close()
	rc, err := nl.SyscallConn()
	if err != nil {
		return fmt.Errorf("raw nftables socket: %w", err)
	}
	w.reasons = w.reasons[:0]
	for {
		var n, flags int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, _, flags, _, rerr = unix.Recvmsg(int(fd), w.buf, nil, unix.MSG_DONTWAIT)
			return rerr != unix.EAGAIN && rerr != unix.EWOULDBLOCK
		})
		switch err = cmp.Or(err, rerr); {
		case errors.Is(err, unix.ENOBUFS):
			return fmt.Errorf("socket overrun: %w", err)
		case err != nil:
			return fmt.Errorf("receive nftables event: %w", err)
		case flags&unix.MSG_TRUNC != 0:
			return fmt.Errorf("nftables event larger than %d bytes, truncated", len(w.buf))
		}
		w.datagram(w.buf[:n])
	}
}

// datagram handles one datagram's messages.
func (w *watcher) datagram(b []byte) {
	for {
		m, rest, ok := nextMessage(b)
		if !ok {
			return
		}
		b = rest
		if m.typ != unix.NFT_MSG_NEWGEN {
			if r := w.state.notice(m); r != "" {
				w.reasons = append(w.reasons, r)
			}
			continue
		}
		if len(w.reasons) > 0 {
			pid, comm := generation(m)
			if !isOwn(m.portID, pid, w.own, w.globalPIDs) {
				reason := w.reasons[0]
				if len(w.reasons) > 1 {
					reason += fmt.Sprintf(" (+%d more)", len(w.reasons)-1)
				}
				reason += fmt.Sprintf(" by %s[%d]", comm, pid)
				w.log.Debug("nftables change", zap.String("reason", reason))
				w.trigger(reason)
			}
		}
		w.reasons = w.reasons[:0]
	}
}
