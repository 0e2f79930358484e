package main

// knobVariants revert one tuning knob each.
func knobVariants() []variant {
	return []variant{
		{name: "gogc200", env: []string{"NODELOCALDNS_TUNING=off", "GOGC=200"}},
		{name: "gogc400", env: []string{"NODELOCALDNS_TUNING=off", "GOGC=400"}},
		{name: "gogc800", env: []string{"NODELOCALDNS_TUNING=off", "GOGC=800"}},
	}
}
