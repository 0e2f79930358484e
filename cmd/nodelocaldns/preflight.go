package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/nodelocaldns/nodelocaldns/internal/desired"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
	"github.com/nodelocaldns/nodelocaldns/internal/preflight"
	"github.com/nodelocaldns/nodelocaldns/internal/supervisor"
)

// printRules is `-print-rules`: the table the agent would program for these flags on this node, from the one
// desired state every mode builds (internal/desired), on stdout; the link-local fallback table it would keep
// were it alone, after it; the preflight on stderr. A kernel the preflight finds without nft_socket gets the
// ungated table the agent falls back to there. It changes nothing.
func printRules(o *options.Options, getenv func(string) string, node preflight.Node, stdout, stderr io.Writer) int {
	pf := node.Check(o.LocalIPs) // before anything is printed: the table depends on it
	f := desired.FromEnv(o, getenv)
	f.NoSocket = slices.ContainsFunc(pf.Missing(), func(m preflight.Finding) bool { return m.Name == preflight.CapSocket })
	st := desired.Of(o, f)
	if err := st.Validate(); err != nil {
		fmt.Fprintf(stderr, "nodelocaldns: %v\n", err)
		return 2
	}
	if st.Table {
		fmt.Fprint(stdout, nft.Build(st.NFT).Text(nft.TableName))
	} else {
		fmt.Fprintln(stderr, "nodelocaldns: no table: -setupinterface=false -setupnftables=false touches no kernel state")
	}
	if fallback, why := supervisor.PrintFallback(st); fallback == nil {
		fmt.Fprintf(stderr, "nodelocaldns: no link-local fallback table: %s\n", why)
	} else {
		fmt.Fprintf(stdout, "\n# link-local fallback %s\n%s", why, fallback)
	}
	printPreflight(stderr, pf)
	return 0
}

// printPreflight writes, for -print-rules, what this node lacks of the printed table's needs and what each
// costs (internal/preflight): on stderr, so that stdout stays the ruleset alone. It changes nothing.
func printPreflight(stderr io.Writer, r preflight.Report) {
	for _, l := range r.Lines() {
		fmt.Fprintln(stderr, l)
	}
}
