package main

// knobVariants revert one tuning knob each.
func knobVariants() []variant {
	return []variant{
		{name: "pgo+gogc400", pgo: "/tmp/pgo/default.pgo", env: []string{"GOGC=400"}},
		{name: "nopgo+gogc400", pgo: "off", env: []string{"GOGC=400"}},
	}
}
