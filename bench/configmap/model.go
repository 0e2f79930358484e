package main

import (
	"math/rand/v2"
	"time"
)

// node-cache's design, as computed expectations (not measured: node-cache is not run here). From the ..data
// rename, node-cache notices the change at its next poll of the ConfigMap directory (every 10 s, at an unrelated
// phase: uniform in [0, 10 s)), writes the Corefile, and then either
//   - waits for CoreDNS's reload plugin, whose ticker checks the file every 30 s +/- half of the 15 s jitter
//     (plugin/reload/setup.go: interval + rand(jitter) - jitter/2, chosen once per instance), at an unrelated
//     phase: uniform in [0, interval); or
//   - with -reloadwithsignal, reloads at once (SIGUSR1 to itself; the reload itself is neglected here).
//
// Kubelet's own propagation delay (sync period plus cache TTL) comes before the rename and is excluded on both
// sides.
const (
	nodeCachePoll   = 10 * time.Second
	reloadInterval  = 30 * time.Second
	reloadJitter    = 15 * time.Second
	modelSamples    = 1_000_000
	modelSeed       = 5 // fixed: the table is reproducible
	nodeCacheMaxRel = nodeCachePoll + reloadInterval + reloadJitter/2
)

// modelNodeCache returns sampled delays for node-cache with the reload plugin and with -reloadwithsignal.
func modelNodeCache() (plugin, signal []time.Duration) {
	r := rand.New(rand.NewPCG(modelSeed, modelSeed))
	uniform := func(d time.Duration) time.Duration { return time.Duration(r.Int64N(int64(d))) }
	plugin = make([]time.Duration, modelSamples)
	signal = make([]time.Duration, modelSamples)
	for i := range modelSamples {
		poll := uniform(nodeCachePoll)
		interval := reloadInterval + uniform(reloadJitter) - reloadJitter/2
		plugin[i] = poll + uniform(interval)
		signal[i] = poll
	}
	return plugin, signal
}
