package fairshare

import (
	"strconv"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
)

// Name is the directive's name.
const Name = "fairshare"

// MaxWait bounds how long a query waits for a slot: forward's own deadline for one query (5 s), so a query that
// waits is held no longer than one admitted at once could be.
const MaxWait = 5 * time.Second

// Setup is the directive's setup function (plugin.Register(Name, Setup), in dnsserver). A block that names it
// more than once gets one limiter, with the largest LIMIT.
func Setup(c *caddy.Controller) error {
	limit := 0
	for c.Next() {
		args := c.RemainingArgs()
		if len(args) != 1 {
			return plugin.Error(Name, c.ArgErr())
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 {
			return plugin.Error(Name, c.Errf("LIMIT %q is not a positive number", args[0]))
		}
		if c.NextBlock() {
			return plugin.Error(Name, c.Errf("unknown property %q", c.Val()))
		}
		limit = max(limit, n)
	}
	registerMetrics()
	f := &Fair{lim: newLimiter(limit, MaxWait)}
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		f.Next = next
		return f
	})
	return nil
}
