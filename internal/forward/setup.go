package forward

import (
	"fmt"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
)

// Setup is the `forward` directive's setup, counting into m: CoreDNS's syntax and meaning (plugin/forward's
// README), over our transport for plain DNS upstreams. CoreDNS's plugin keeps the name forward in caddy's
// registry, so this one is registered under another (internal/dnsserver's forwardDirective), run unless Env
// asks for CoreDNS's.
func Setup(m *Metrics) caddy.SetupFunc { return SetupWith(m, nil) }

// SetupWith is Setup that also hands each stanza's Forward to each, once parsed: the embedding server keeps
// them to set what the agent's flags ask of them when it commits the configuration (CarryClientSubnet).
func SetupWith(m *Metrics, each func(*caddy.Controller, *Forward)) caddy.SetupFunc {
	return func(c *caddy.Controller) error { return setup(c, m, each) }
}

func setup(c *caddy.Controller, m *Metrics, each func(*caddy.Controller, *Forward)) error {
	var fs []*Forward
	for c.Next() {
		f, err := parseStanza(c)
		if err != nil {
			return plugin.Error(Name, err)
		}
		f.m = m
		for _, p := range f.proxies {
			p.m = m
		}
		fs = append(fs, f)
	}
	for i, f := range fs {
		if f.toEntries > maxUpstreams {
			return plugin.Error(Name, fmt.Errorf("more than %d TOs configured: %d", maxUpstreams, f.toEntries))
		}
		if i == len(fs)-1 {
			dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
				f.Next = next
				return f
			})
		} else {
			// Several forwards in one block are chained: `next` hands a query to the following one.
			following := fs[i+1]
			dnsserver.GetConfig(c).AddPlugin(func(plugin.Handler) plugin.Handler {
				f.Next = following
				return f
			})
		}
		c.OnStartup(f.OnStartup)
		c.OnShutdown(f.OnShutdown)
		if each != nil {
			each(c, f)
		}
	}
	return nil
}
