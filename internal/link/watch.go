package link

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nodelocaldns/nodelocaldns/internal/nlwatch"
)

// Trigger reasons passed to Watch's trigger function; the supervisor counts passes by them.
const (
	ReasonLinkDeleted = "link deleted"
	ReasonLinkDown    = "link down"
	ReasonLinkRenamed = "link renamed"
	ReasonAddrRemoved = "address removed"
)

// watchConfig holds Watch's knobs; tests shrink the receive buffer to force an overrun.
type watchConfig struct {
	rcvbuf  int // socket receive buffer, bytes (SO_RCVBUFFORCE: we run with CAP_NET_ADMIN)
	backoff nlwatch.Backoff
}

// defaultRcvbuf is Watch's receive buffer: 1 MiB holds thousands of notifications, so a burst (a CNI creating
// hundreds of veths) does not overrun us; the default rmem (~200 KiB) can.
const defaultRcvbuf = 1 << 20

// Watch subscribes to link and address notifications and calls trigger when the link named name is deleted,
// renamed or set down, or when one of its addresses is removed. When a subscription fails or overruns (events
// may have been lost), it subscribes again and then calls trigger([nlwatch.ReasonOverrun]), with
// internal/nlwatch's policy. It returns nil when ctx is done, and an error only when the first subscription
// fails. Events caused by our own repairs (creating the link, removing a stray address) trigger at most one
// more pass, which finds the kernel in sync and writes nothing, so they cannot loop.
func Watch(ctx context.Context, log *zap.Logger, name string, trigger func(reason string)) error {
	cfg := watchConfig{rcvbuf: defaultRcvbuf, backoff: nlwatch.DefaultBackoff()}
	return watch(ctx, log.Named("link"), name, trigger, cfg)
}

func watch(ctx context.Context, log *zap.Logger, name string, trigger func(string), cfg watchConfig) error {
	err := nlwatch.Run(ctx, log.With(zap.String("link", name)), cfg.backoff, trigger, func(ctx context.Context, up func()) error {
		return watchOnce(ctx, log, name, trigger, cfg, up)
	})
	if err != nil {
		return fmt.Errorf("watch link %q: %w", name, err)
	}
	return nil
}

// errLost says a subscription's reader stopped (the library closes its channel after a receive error).
var errLost = errors.New("subscription closed")

// watchOnce subscribes, calls live once both subscriptions are up, and relays events until ctx is done or a
// subscription ends.
func watchOnce(ctx context.Context, log *zap.Logger, name string, trigger func(string), cfg watchConfig,
	live func()) error {
	done := make(chan struct{})
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	var subscribed []func()
	defer func() {
		close(done)
		// The library's readers block sending to their channel; drain until they see the closed socket.
		for _, drain := range subscribed {
			drain()
		}
	}()
	onErr := func(err error) { log.Debug("link event subscription error", zap.Error(err)) }
	lopts := netlink.LinkSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: cfg.rcvbuf, ReceiveBufferForceSize: true}
	if err := netlink.LinkSubscribeWithOptions(links, done, lopts); err != nil {
		return fmt.Errorf("subscribe to link events: %w", err)
	}
	subscribed = append(subscribed, func() {
		for range links {
		}
	})
	aopts := netlink.AddrSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: cfg.rcvbuf, ReceiveBufferForceSize: true}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, aopts); err != nil {
		return fmt.Errorf("subscribe to address events: %w", err)
	}
	subscribed = append(subscribed, func() {
		for range addrs {
		}
	})
	// Look the link up only once subscribed, so a change between the lookup and the subscription is not missed.
	index, err := linkIndex(name)
	if err != nil {
		return err
	}
	live()
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-links:
			if !ok {
				return fmt.Errorf("link events: %w", errLost)
			}
			if reason := linkEvent(u, name, &index); reason != "" {
				trigger(reason)
			}
		case u, ok := <-addrs:
			if !ok {
				return fmt.Errorf("address events: %w", errLost)
			}
			if !u.NewAddr && index != 0 && u.LinkIndex == index {
				trigger(ReasonAddrRemoved)
			}
		}
	}
}

// linkEvent judges one link notification and keeps *index, our link's ifindex (0 when absent), current.
func linkEvent(u netlink.LinkUpdate, name string, index *int) string {
	a := u.Link.Attrs()
	switch {
	case a.Name == name && u.Header.Type == unix.RTM_DELLINK:
		*index = 0
		return ReasonLinkDeleted
	case a.Name == name:
		*index = a.Index
		if a.Flags&net.FlagUp == 0 {
			return ReasonLinkDown
		}
	case *index != 0 && a.Index == *index:
		// Our ifindex under another name: renamed away (or deleted right after a rename).
		*index = 0
		return ReasonLinkRenamed
	}
	return ""
}

// linkIndex returns the ifindex of the link named name, 0 when there is none, on a handle with the Manager's
// request deadline.
func linkIndex(name string) (int, error) {
	h, err := openHandle()
	if err != nil {
		return 0, err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	switch {
	case isNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("look up link %q: %w", name, err)
	}
	return l.Attrs().Index, nil
}
