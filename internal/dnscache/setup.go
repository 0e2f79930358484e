package dnscache

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
)

// Setup returns the `cache` directive's setup function, its caches counting into m (internal/dnsserver
// registers it as "cache"; not at init, so that a test binary can link CoreDNS's cache plugin beside this one).
// nil counts into a set registered nowhere.
func Setup(m *Metrics) caddy.SetupFunc {
	if m == nil {
		m = NewMetrics(nil)
	}
	return func(c *caddy.Controller) error { return setup(c, m) }
}

func setup(c *caddy.Controller, m *Metrics) error {
	ca, err := Parse(c)
	if err != nil {
		return plugin.Error("cache", err)
	}
	ca.metrics = m
	cfg := dnsserver.GetConfig(c)
	ca.cfg = cfg
	c.OnStartup(func() error {
		ca.viewLabel = cfg.ViewName
		for _, h := range cfg.Handlers() {
			if b, ok := h.(zoneBypasser); ok {
				ca.bypass = append(ca.bypass, b.CacheBypassZones()...)
			}
		}
		return nil
	})
	c.OnShutdown(func() error { ca.metrics.entries.stopped(ca); return nil })
	announce(c, cfg, ca)
	cfg.AddPlugin(func(next plugin.Handler) plugin.Handler {
		ca.Next = next
		return ca
	})
	return nil
}

// zoneBypasser is CoreDNS's cache.ZoneBypasser: a plugin whose authoritative zones must never be cached.
type zoneBypasser interface{ CacheBypassZones() []string }

// Parse reads one `cache` directive:
//
//	cache [TTL] [ZONES...] {
//	    success CAPACITY [TTL] [MINTTL]
//	    denial CAPACITY [TTL] [MINTTL]
//	    prefetch AMOUNT [[DURATION] [PERCENTAGE%]]
//	    serve_stale [DURATION] [immediate [RESPONSE_TTL [FAILURE_RECHECK]] | verify [VERIFY_TIMEOUT [RESPONSE_TTL [FAILURE_RECHECK]]]]
//	    serve_stale_policy prefer_positive
//	    servfail DURATION
//	    disable success|denial [ZONES...]
//	    keepttl
//	}
//
// with CoreDNS 1.15's defaults, bounds and error messages.
func Parse(c *caddy.Controller) (*Cache, error) {
	ca := New()
	for i := 0; c.Next(); i++ {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		args := c.RemainingArgs()
		if len(args) > 0 {
			if ttl, err := strconv.Atoi(args[0]); err == nil {
				if ttl <= 0 {
					return nil, fmt.Errorf("cache TTL can not be zero or negative: %d", ttl)
				}
				ca.pttl, ca.nttl = time.Duration(ttl)*time.Second, time.Duration(ttl)*time.Second
				args = args[1:]
			}
		}
		origins := plugin.OriginsFromArgsOrServerBlock(args, c.ServerBlockKeys)
		stale, policy := false, false
		for c.NextBlock() {
			var err error
			switch opt := c.Val(); opt {
			case Success:
				err = parseCapacity(c, &ca.pcap, &ca.pttl, &ca.minpttl)
			case Denial:
				err = parseCapacity(c, &ca.ncap, &ca.nttl, &ca.minnttl)
			case "prefetch":
				err = parsePrefetch(c, ca)
			case "serve_stale":
				stale = true
				err = parseServeStale(c, ca)
			case "serve_stale_policy":
				if policy {
					return nil, errors.New("serve_stale_policy can only be specified once")
				}
				policy = true
				args := c.RemainingArgs()
				if len(args) != 1 {
					return nil, c.ArgErr()
				}
				if !strings.EqualFold(args[0], "prefer_positive") {
					return nil, fmt.Errorf("invalid serve_stale_policy: %s", args[0])
				}
				ca.preferPositive = true
			case "servfail":
				err = parseServfail(c, ca)
			case "disable":
				err = parseDisable(c, ca)
			case "keepttl":
				if len(c.RemainingArgs()) != 0 {
					return nil, c.ArgErr()
				}
				ca.keepttl = true
			default:
				return nil, c.ArgErr()
			}
			if err != nil {
				return nil, err
			}
		}
		if policy && !stale {
			return nil, errors.New("serve_stale_policy requires serve_stale")
		}
		ca.Zones, ca.zonesLabel = origins, strings.Join(origins, ",")
	}
	ca.build()
	return ca, nil
}

// parseCapacity reads `success|denial CAPACITY [TTL] [MINTTL]`.
func parseCapacity(c *caddy.Controller, capacity *int, ttl, minttl *time.Duration) error {
	args := c.RemainingArgs()
	if len(args) == 0 {
		return c.ArgErr()
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	*capacity = n
	if len(args) > 1 {
		t, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		if t <= 0 {
			return fmt.Errorf("cache TTL can not be zero or negative: %d", t)
		}
		*ttl = time.Duration(t) * time.Second
	}
	if len(args) > 2 {
		m, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		if m < 0 {
			return fmt.Errorf("cache min TTL can not be negative: %d", m)
		}
		*minttl = time.Duration(m) * time.Second
	}
	return nil
}

func parsePrefetch(c *caddy.Controller, ca *Cache) error {
	args := c.RemainingArgs()
	if len(args) == 0 || len(args) > 3 {
		return c.ArgErr()
	}
	amount, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	if amount < 0 {
		return fmt.Errorf("prefetch amount should be positive: %d", amount)
	}
	ca.prefetch = amount
	if len(args) > 1 {
		if ca.duration, err = time.ParseDuration(args[1]); err != nil {
			return err
		}
	}
	if len(args) > 2 {
		pct := args[2]
		if x := pct[len(pct)-1]; x != '%' {
			return fmt.Errorf("last character of percentage should be `%%`, but is: %q", x)
		}
		n, err := strconv.Atoi(pct[:len(pct)-1])
		if err != nil {
			return err
		}
		if n < 10 || n > 90 {
			return fmt.Errorf("percentage should fall in range [10, 90]: %d", n)
		}
		ca.percentage = n
	}
	return nil
}

func parseServfail(c *caddy.Controller, ca *Cache) error {
	args := c.RemainingArgs()
	if len(args) != 1 {
		return c.ArgErr()
	}
	d, err := time.ParseDuration(args[0])
	switch {
	case err != nil:
		return err
	case d < 0:
		return errors.New("invalid negative ttl for servfail")
	case d > 5*time.Minute:
		return errors.New("caching SERVFAIL responses over 5 minutes is not permitted") // RFC 2308
	}
	ca.failttl = d
	return nil
}

func parseDisable(c *caddy.Controller, ca *Cache) error {
	args := c.RemainingArgs()
	if len(args) < 1 {
		return c.ArgErr()
	}
	zones := []string{"."}
	if len(args) > 1 {
		zones = nil
		for _, z := range args[1:] {
			nz := plugin.Name(z).Normalize()
			if nz == "" {
				return fmt.Errorf("invalid disabled zone: %s", z)
			}
			zones = append(zones, nz)
		}
	}
	switch args[0] {
	case Denial:
		ca.nexcept = zones
	case Success:
		ca.pexcept = zones
	default:
		return fmt.Errorf("cache type for disable must be %q or %q", Success, Denial)
	}
	return nil
}
