package dnsserver

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodelocaldns/nodelocaldns/internal/dnscache"
	"github.com/nodelocaldns/nodelocaldns/internal/fairshare"
	"github.com/nodelocaldns/nodelocaldns/internal/forward"
)

// Our directives count into the registry their Server was made with (Options.Registerer), into the same series
// across reloads. caddy calls a directive's setup with nothing but a Controller, and keeps its plugins per
// process (register, plugins.go), so a setup cannot be handed its Server: the Server lends its env for the
// length of its caddy.Start or Restart (lend), under a lock held across Servers, and our setups, which caddy
// runs on that call's goroutine, take it from there (envOf). A configuration caddy starts without a Server
// (a test calling caddy.Start itself) counts into series registered nowhere.

// directiveEnv is what one Server's directives count into.
type directiveEnv struct {
	reg   prometheus.Registerer // nil: nowhere
	cache *dnscache.Metrics
	// forward is made with the env: our forward's series are exported (at zero) before the first miss, as
	// upstream's are.
	forward *forward.Metrics
	// fair is made at the first fairshare setup: its series appears once a Corefile uses the directive.
	fair func() *fairshare.Metrics
	// runtimeMetrics swaps the Go collector for one with every runtime metric, as upstream's runtime_metrics
	// does, once.
	runtimeMetrics func() error
}

func newDirectiveEnv(reg prometheus.Registerer) *directiveEnv {
	return &directiveEnv{reg: reg, cache: dnscache.NewMetrics(reg), forward: forward.NewMetrics(reg),
		fair:           sync.OnceValue(func() *fairshare.Metrics { return fairshare.NewMetrics(reg) }),
		runtimeMetrics: sync.OnceValue(func() error { return swapGoCollector(reg) })}
}

// swapGoCollector replaces reg's default Go collector, if it has one, with one that has every runtime metric.
// Another Server of the process may have swapped it already.
func swapGoCollector(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	reg.Unregister(collectors.NewGoCollector())
	err := reg.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)))
	if _, dup := errors.AsType[prometheus.AlreadyRegisteredError](err); dup {
		return nil
	}
	return err
}

// starting is the env of the Server whose caddy.Start or Restart is running, if any.
var starting struct {
	mu  sync.Mutex // one Server's start or restart at a time, in the process
	env atomic.Pointer[directiveEnv]
}

// lend runs start, a caddy.Start or Restart, with env lent to our directives' setups.
func lend[T any](env *directiveEnv, start func() (T, error)) (T, error) {
	starting.mu.Lock()
	defer starting.mu.Unlock()
	starting.env.Store(env)
	defer starting.env.Store(nil)
	return start()
}

// envOf is the env of the Server starting the configuration being set up: a new one counting nowhere when no
// Server is.
func envOf() *directiveEnv {
	if e := starting.env.Load(); e != nil {
		return e
	}
	return newDirectiveEnv(nil)
}
