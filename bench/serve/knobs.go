package main

// knobVariants run the default configuration with one of tune's knobs (cmd/nodelocaldns/tuning.go) changed, so
// the table shows what each buys with the fast path in place. (The goroutine stack tuner had rows here,
// fast+stacks and off+stacks+400, until it was removed for buying nothing: docs/performance.md.)
func knobVariants() []variant {
	return append([]variant{
		{name: "fast GOGC=400", mixed: true, miss: true, env: []string{"GOGC=400"}, hint: "the defaults but GOGC=400 (the default before the fast path)"},
	}, clientsVariants()...)
}
