package supervisor

import (
	"net/netip"

	"github.com/nodelocaldns/nodelocaldns/internal/handover"
)

// detachListeners hands new DNS queries to the instance that stays: every UDP socket of this process bound to
// one of ips on port (CoreDNS's listeners and the fast path's) leaves the SO_REUSEPORT group, and what is queued
// on them stays readable for CoreDNS to answer before it stops. It returns how many it detached. The kernel
// contract and the protocol with the fast path are internal/handover's doc comment.
func detachListeners(ips []netip.Addr, port uint16) (int, error) {
	return handover.DetachBound(ips, port)
}
