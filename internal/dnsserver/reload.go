package dnsserver

import (
	"fmt"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
)

// The `reload` directive is accepted with upstream's syntax and limits, and does nothing.
//
// Upstream's reload plugin polls the file named by CoreDNS's -conf flag and restarts the instance when its hash
// changes. Embedded, there is no such flag: its loader falls back to CoreDNS's built-in default Corefile and the
// reload drops every server we configured. And when it works, it races our own reload of the same change, so a
// ConfigMap update would restart CoreDNS twice (node-cache's commit 9c1282ae traced SIGTERM deadlocks to such
// overlapping restarts). nodelocaldns reloads in-process on the ConfigMap watcher's events instead, in
// milliseconds, so the directive stays valid for the operator's Corefile and simply has nothing left to do.
func setupReload(c *caddy.Controller) error {
	for c.Next() {
		args := c.RemainingArgs()
		if len(args) > 2 {
			return plugin.Error("reload", c.ArgErr())
		}
		interval, jitter := 30*time.Second, 15*time.Second
		var err error
		if len(args) > 0 {
			if interval, err = time.ParseDuration(args[0]); err != nil {
				return plugin.Error("reload", err)
			}
		}
		if len(args) > 1 {
			if jitter, err = time.ParseDuration(args[1]); err != nil {
				return plugin.Error("reload", err)
			}
		}
		if interval < 2*time.Second {
			return plugin.Error("reload", fmt.Errorf("interval value must be greater or equal to %v", 2*time.Second))
		}
		if jitter != 0 && jitter < time.Second {
			return plugin.Error("reload", fmt.Errorf("jitter value must be 0 or greater or equal to %v", time.Second))
		}
	}
	return nil
}
