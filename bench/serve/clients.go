package main

// clientsOffName is the default configuration without the per-client accounting (internal/clients): beside
// the nodelocaldns row, what counting every answer per client costs. With -variants; for the comparison alone:
// `-variants -only 'nodelocaldns,clients off' -skip mixed,miss -soak 0`.
const clientsOffName = "clients off"

func clientsVariants() []variant {
	return []variant{{name: clientsOffName, mixed: true, miss: true, env: []string{"NODELOCALDNS_CLIENTS=off"},
		hint: "NODELOCALDNS_CLIENTS=off: the defaults without the per-client accounting"}}
}
