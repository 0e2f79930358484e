package dnsserver

import (
	"os"
	"sync/atomic"

	"github.com/coredns/caddy"

	"github.com/nodelocaldns/nodelocaldns/internal/fastpath"
)

// fastPath answers cache hits before CoreDNS's server (internal/fastpath). It is created with the first
// instance, follows every instance that starts (Start, and Reload, whose new instance caddy announces the same
// way) and closes with the last. NODELOCALDNS_FASTPATH=off leaves CoreDNS serving alone.
var fastPath atomic.Pointer[fastpath.Path]

func onInstanceStartup(ev caddy.EventName, info any) error {
	inst, ok := info.(*caddy.Instance)
	s := current.Load()
	if ev != caddy.InstanceStartupEvent || !ok || s == nil || !fastpath.Enabled(os.Getenv) {
		return nil
	}
	p := fastPath.Load()
	if p == nil {
		p = fastpath.New(s.log.Named("fastpath"))
		fastPath.Store(p)
	}
	p.Sync(inst)
	// Run by Stop (ShutdownCallbacks) after the lameduck, and not by a reload, which runs only OnShutdown.
	inst.OnFinalShutdown = append(inst.OnFinalShutdown, func() error { p.Close(); return nil })
	return nil
}
