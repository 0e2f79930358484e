package main

// knobVariants run the untuned engine with one runtime knob set the way tune (cmd/nodelocaldns/tuning.go) sets
// it, so the table shows what each knob buys on its own.
func knobVariants() []variant {
	return []variant{
		{name: "untuned+GOGC=200", env: []string{"NODELOCALDNS_TUNING=off", "GOGC=200"}, hint: "Go defaults but GOGC=200"},
		{name: "untuned+GOGC=400", env: []string{"NODELOCALDNS_TUNING=off", "GOGC=400"}, hint: "Go defaults but GOGC=400 (tune's default)"},
	}
}
