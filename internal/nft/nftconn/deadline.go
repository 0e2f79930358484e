package nftconn

import (
	"time"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// RequestTimeout bounds every request on our sockets ([nlsock.RequestTimeout]).
const RequestTimeout = nlsock.RequestTimeout

// lock takes c.mu and sets the deadline for the requests made while holding it.
func (c *Conn) lock() {
	c.mu.Lock()
	if err := c.sock.SetDeadline(time.Now().Add(RequestTimeout)); err != nil {
		c.log.Debug("set netlink deadline", zap.Error(err))
	}
}
