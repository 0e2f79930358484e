package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Which version's fallback table stands. Every instance derives the same decision from the instance tables
// ([DecideFallback]), but two versions whose rules for it differ (one more counter, a rewritten
// reply rule) would each find the other's table out of sync and write its own, for ever. So the table says
// which generation of the rules wrote it, and for which targets (the stamp, the first rule's comment):
//
//   - a writer replaces a table of a lower generation (or none: before stamps) as it replaces any table out
//     of sync: an upgrade takes over in one pass;
//   - a writer leaves a table of a higher generation alone while it is the same decision (the same targets
//     in the stamp, the same covered pairs in the sets, which every generation reads alike), and renews it
//     only once its lease is nearly gone (a newer instance renews it first while it runs): a rollback writes
//     its own once the newer instances are gone and the lease has run down to a quarter, or at once when the
//     decision changes (an address, a target) or the table goes.
//
// fallbackGeneration (fallback_generation.go) is bumped with every change of BuildFallback's rules;
// TestFallbackGenerationPinsTheRules fails until it is.

// FallbackStamp is what the fallback table says of its writer.
type FallbackStamp struct {
	Generation int
	Targets    []netip.Addr // sorted
}

// stampPrefix starts the stamp's comment.
const stampPrefix = "nodelocaldns-fallback generation "

func (s FallbackStamp) String() string {
	t := make([]string, len(s.Targets))
	for i, ip := range s.Targets {
		t[i] = ip.String()
	}
	return stampPrefix + strconv.Itoa(s.Generation) + " towards " + strings.Join(t, ",")
}

// Newer reports whether s was written by a later generation than this build's.
func (s FallbackStamp) Newer() bool { return s.Generation > fallbackGeneration }

// ParseStamp reads a stamp's comment (nftconn reads it off the fallback table's first rule).
func ParseStamp(c string) (FallbackStamp, bool) {
	rest, ok := strings.CutPrefix(c, stampPrefix)
	if !ok {
		return FallbackStamp{}, false
	}
	gen, targets, ok := strings.Cut(rest, " towards ")
	n, err := strconv.Atoi(gen)
	if !ok || err != nil {
		return FallbackStamp{}, false
	}
	s := FallbackStamp{Generation: n}
	for _, t := range strings.Split(targets, ",") {
		ip, err := netip.ParseAddr(t)
		if err != nil {
			return FallbackStamp{}, false
		}
		s.Targets = append(s.Targets, ip)
	}
	slices.SortFunc(s.Targets, netip.Addr.Compare)
	return s, true
}

// commentStmt is a rule's comment: no bytecode; nft lists it last, and userData hands it to the kernel.
func commentStmt(c string) stmt { return stmt{text: fmt.Sprintf("comment %q", c)} }
