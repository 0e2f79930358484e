package nft

import (
	"time"

	"go.uber.org/zap"
)

// RequestTimeout bounds every request on our sockets (the notifications' reader too, nftwatch): the kernel answers nftables requests in microseconds to
// milliseconds (a dump of our table, one batch), so a request unanswered for this long means the socket is
// wedged, and the caller gets an error it can count and retry instead of a reconcile loop that hangs.
const RequestTimeout = 5 * time.Second

// lock takes c.mu and sets the deadline for the requests made while holding it.
func (c *Conn) lock() {
	c.mu.Lock()
	if err := c.ops.SetDeadline(time.Now().Add(RequestTimeout)); err != nil {
		c.log.Debug("set netlink deadline", zap.Error(err))
	}
}

// SetDeadline bounds the next requests on our socket (see RequestTimeout).
func (k *kernelOps) SetDeadline(t time.Time) error { return k.nl.SetDeadline(t) }
