package instance

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
)

// tableStage is what our table holds at each step of an instance's life (state.go says when each comes).
type tableStage int

const (
	tableNone       tableStage = iota // not created yet
	tableRegistered                   // the sets only ([nft.Registration])
	tableListening                    // and raw-output: our listeners are bound ([nft.Listening])
	tableServing                      // every chain ([nft.Build])
	tableGone                         // deleted by leave: nothing programs it again

	tableAsIs tableStage = -1 // for program: the stage the table is at
)

// New is the instance a desired state makes from its table's spec and its interface's (the desired state's
// NFT and Link), over the kernel's handles (nil: none): serving and -teardown alike.
func New(log *zap.Logger, m *metrics.Metrics, spec nft.Spec, l link.Spec, reg Registry, links LinkManager) *Node {
	return &Node{log: log, m: m, reg: reg, links: links, link: l, spec: spec}
}

// desired is the table for stage from what the node knows now: its spec (the latest unbound addresses,
// Ungated as serve found the kernel) and the addresses it steps aside for. Called with specMu held, so that
// the three are one snapshot.
func (n *Node) desired(stage tableStage) *nft.Ruleset {
	spec := n.spec
	spec.StepAside = n.aside
	switch stage {
	case tableRegistered:
		return nft.Registration(spec)
	case tableListening:
		return nft.Listening(spec)
	case tableServing:
		return nft.Build(spec)
	}
	return nil
}

// program is the one way our table is programmed: it moves it to stage (the start-up steps), or, with
// [tableAsIs], applies it again at the stage it is at after what it is made of changed (stepping aside,
// rebind), in one transaction either way; a table that would not change is not applied. A table not made yet gets such a change when its first stage is
// programmed; once leave deleted it, nothing is programmed.
func (n *Node) program(stage tableStage) error {
	n.specMu.Lock()
	defer n.specMu.Unlock()
	if stage == tableAsIs {
		stage = n.stage
	}
	if n.reg == nil || stage == tableNone || n.stage == tableGone {
		return nil
	}
	want := n.desired(stage)
	if stage == n.stage && reflect.DeepEqual(want, n.applied) {
		return nil // our table is owned: nobody else changed it since
	}
	if err := n.reg.Apply(want); err != nil {
		return err
	}
	n.stage, n.applied = stage, want
	return nil
}

// drain is the drain table that takes our table's place when we leave ([nft.Draining]); from then on nothing
// programs our table again, so a rebind or a foreign pass cannot bring it back.
func (n *Node) drain() *nft.Ruleset {
	n.specMu.Lock()
	defer n.specMu.Unlock()
	n.stage = tableGone
	return nft.Draining(n.spec)
}

// setUnbound records the local IPs without a listener; it reports whether they changed.
func (n *Node) SetUnbound(ips []netip.Addr) bool {
	n.specMu.Lock()
	defer n.specMu.Unlock()
	if slices.Equal(n.spec.Unbound, ips) {
		return false
	}
	n.spec.Unbound = ips
	return true
}

// rebind programs our table again for the latest unbound addresses, at the stage it is at: a table that
// marks host-network queries (listening or serving) keeps doing so, for the bound addresses only.
func (n *Node) Rebind() error {
	if err := n.program(tableAsIs); err != nil {
		return fmt.Errorf("keep host-network rules to the bound addresses: %w", err)
	}
	return nil
}
