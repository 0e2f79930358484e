package main

// knobVariants run the default configuration with one of tune's knobs (cmd/nodelocaldns/tuning.go) changed, so
// the table shows what each buys with the fast path in place.
func knobVariants() []variant {
	return []variant{
		{name: "fast GOGC=400", mixed: true, env: []string{"GOGC=400"}, hint: "the defaults but GOGC=400 (the default before the fast path)"},
		{name: "fast GOGC=200", env: []string{"GOGC=200"}, hint: "the defaults but GOGC=200"},
		{name: "fast untuned", mixed: true, env: []string{"NODELOCALDNS_TUNING=off"}, hint: "fast path on, NODELOCALDNS_TUNING=off: no stack sizing, Go's defaults"},
	}
}
