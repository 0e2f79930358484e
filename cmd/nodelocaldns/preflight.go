package main

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/nodelocaldns/nodelocaldns/internal/preflight"
)

// printPreflight writes, for -print-rules, what this node lacks of the printed table's needs and what each
// costs (internal/preflight): on stderr, so that stdout stays the ruleset alone. It changes nothing.
func printPreflight(stderr io.Writer, node preflight.Node, localIPs []netip.Addr) {
	for _, l := range node.Check(localIPs).Lines() {
		fmt.Fprintln(stderr, l)
	}
}
