package main

// knobVariants run the engine with one of tune's knobs (cmd/nodelocaldns/tuning.go) and not the other, so the
// table shows what each buys on its own.
func knobVariants() []variant {
	return []variant{
		{name: "stacks only", env: []string{"GOGC=100"}, hint: "default tuning but GOGC=100: query-sized goroutine stacks alone (stacks.go)"},
		{name: "GOGC=400 only", env: []string{"NODELOCALDNS_TUNING=off", "GOGC=400"}, hint: "Go defaults but GOGC=400: tune's GC setting alone"},
		{name: "stacks+GOGC=200", env: []string{"GOGC=200"}, hint: "default tuning but GOGC=200: the GC setting not chosen"},
	}
}
