// Package nlwatch keeps a netlink event subscription alive, with one policy for every watcher of the agent
// (internal/nft's nftables events, internal/link's link and address events): subscribe, relay, and when a
// subscription ends (a socket overrun, ENOBUFS, a failed socket) subscribe again and say that events may have
// been lost.
//
// May touch: nothing.
package nlwatch

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// ReasonOverrun is the trigger reason after a resubscription: events may have been lost in between, so the
// caller cannot know what changed and must do a full pass.
const ReasonOverrun = "overrun"

// Backoff bounds the wait between failed subscription attempts: it starts at Min and doubles up to Max, and
// starts again at Min once a subscription came up.
type Backoff struct{ Min, Max time.Duration }

// DefaultBackoff is the agent's: a lost subscription is usually back at the first attempt, and one that keeps
// failing (the socket cannot be created, the group not joined) is retried twice a minute at most.
func DefaultBackoff() Backoff { return Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second} }

// Subscribe makes one subscription and relays its events until ctx is done or the subscription ends, and
// returns why it ended. It calls up once it is subscribed (every event from then on will be seen), before it
// relays anything.
type Subscribe func(ctx context.Context, up func()) error

// Run keeps subscribe running until ctx is done, and then returns nil. The first subscription must come up,
// or Run returns its error: a watcher that cannot subscribe at all is for the caller to report. After that,
// a subscription that ended is replaced at once and a failed attempt is retried after b's wait; every
// replacement calls trigger(ReasonOverrun) as it comes up, before relaying. trigger runs on Run's goroutine.
func Run(ctx context.Context, log *zap.Logger, b Backoff, trigger func(string), subscribe Subscribe) error {
	first, wait := true, b.Min
	for {
		up := false
		err := subscribe(ctx, func() {
			up = true
			if !first {
				trigger(ReasonOverrun)
			}
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case first && !up:
			return err
		case up:
			first, wait = false, b.Min
			log.Warn("events may have been lost, resubscribing", zap.Error(err))
			continue
		}
		log.Warn("resubscribe failed", zap.Error(err), zap.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, b.Max)
	}
}
