package main

// knobVariants run the default configuration with one of tune's knobs (cmd/nodelocaldns/tuning.go) changed, so
// the table shows what each buys with the fast path in place.
func knobVariants() []variant {
	return []variant{
		{name: "fast GOGC=400", mixed: true, env: []string{"GOGC=400"}, hint: "the defaults but GOGC=400 (the default before the fast path)"},
		{name: "fast+stacks", mixed: true, env: []string{"NODELOCALDNS_STACKS=on"}, hint: "the defaults and NODELOCALDNS_STACKS=on: goroutines start at 16 KiB (stacks.go)"},
		{name: "off+stacks+400", env: []string{"NODELOCALDNS_FASTPATH=off", "NODELOCALDNS_STACKS=on", "GOGC=400"}, hint: "the defaults before the fast path: no fast path, stacks sized, GOGC=400"},
	}
}
