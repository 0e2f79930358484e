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

// Setup returns the directive's setup function, counting into m (internal/dnsserver registers it as Name); nil
// counts into series registered nowhere. A block that names the directive more than once gets one limiter, with
// the largest LIMIT.
func Setup(m *Metrics) caddy.SetupFunc {
	if m == nil {
		m = NewMetrics(nil)
	}
	return func(c *caddy.Controller) error { return setup(c, m) }
}

func setup(c *caddy.Controller, m *Metrics) error {
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
	f := &Fair{lim: newLimiter(limit, MaxWait), refused: m.refused}
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		f.Next = next
		return f
	})
	return nil
}
