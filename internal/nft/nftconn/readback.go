package nftconn

import (
	"fmt"
	"strings"

	"github.com/google/nftables/expr"
)

// exprsKey is a normalised form of a rule's expressions for comparison with what the kernel returns: each
// expression printed with the fields that identify it, leaving out what the kernel does not echo or fills in
// itself (counter values, handles, positions). [FallbackTable.InSync] compares the fallback table with it.
func exprsKey(exprs []expr.Any) string {
	parts := make([]string, 0, len(exprs))
	for _, e := range exprs {
		if _, ok := e.(*expr.Socket); ok {
			// google/nftables v0.3.0 does not decode "socket" in rule dumps (exprsFromMsg drops it), so it is
			// left out on both sides; the golden listings (nft's own decoding) show the gate.
			continue
		}
		parts = append(parts, exprKey(e))
	}
	return strings.Join(parts, "; ")
}

func exprKey(e expr.Any) string {
	switch e := e.(type) {
	case *expr.Meta:
		return fmt.Sprintf("meta key=%d sreg=%v reg=%d", e.Key, e.SourceRegister, e.Register)
	case *expr.Cmp:
		return fmt.Sprintf("cmp op=%d reg=%d data=%x", e.Op, e.Register, e.Data)
	case *expr.Payload:
		// v0.3.0 sends (and so the kernel echoes) the checksum flags only with an L3 checksum type; see
		// ErrFallbackIPv6.
		return fmt.Sprintf("payload op=%d base=%d off=%d len=%d dreg=%d sreg=%d csum=%d/%d/%d",
			e.OperationType, e.Base, e.Offset, e.Len, e.DestRegister, e.SourceRegister, e.CsumType, e.CsumOffset, e.CsumFlags)
	case *expr.Ct:
		// v0.3.0 decodes `ct ... set` (NFTA_CT_SREG) as a load into register 0.
		set := e.SourceRegister || e.Register == 0
		return fmt.Sprintf("ct key=%d dir=%d set=%v", e.Key, e.Direction, set)
	case *expr.Counter:
		return "counter"
	case *expr.Verdict:
		return fmt.Sprintf("verdict kind=%d chain=%q", e.Kind, e.Chain)
	}
	// Bitwise, Immediate, Masq: every field is echoed as sent.
	return fmt.Sprintf("%T%+v", e, e)
}
