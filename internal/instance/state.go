package instance

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// One instance's life is one state machine, which refuses any other transition than these:
//
//	new          nothing in the kernel yet -> registering, or straight to leaving (`-teardown`)
//	registering  own table with the sets only; the interface gains our addresses; CoreDNS starts listening,
//	             then the table gains raw-output (node.listen: host-network queries come to us)
//	             -> serving, or leaving when start-up fails
//	serving      our chains are in: queries to our addresses are intercepted (gated on a live listener)
//	             -> leaving
//	leaving      our table deleted; then, seeing the other instances' tables: remove only the addresses nobody
//	             else needs and keep the interface (hand over), or, when none is left, remove the interface
//	stopped
type state int32

const (
	stateNew state = iota
	stateRegistering
	stateServing
	stateLeaving
	stateStopped
)

func (s state) String() string {
	return [...]string{"new", "registering", "serving", "leaving", "stopped"}[s]
}

// transitions are the only moves the state machine makes, from each state.
var transitions = map[state][]state{
	stateNew:         {stateRegistering, stateLeaving},
	stateRegistering: {stateServing, stateLeaving},
	stateServing:     {stateLeaving},
	stateLeaving:     {stateStopped},
}

// errTransition is what an illegal transition returns.
var errTransition = errors.New("illegal state transition")

func (n *Node) current() state { return state(n.state.Load()) }

// may says whether the instance may move to next now.
func (n *Node) may(next state) error {
	if cur := n.current(); !slices.Contains(transitions[cur], next) {
		return fmt.Errorf("instance %s cannot become %s: %w", cur, next, errTransition)
	}
	return nil
}

// to moves the instance to next, or returns an error and stays where it is when transitions does not allow it.
func (n *Node) to(next state) error {
	for {
		cur := n.current()
		if !slices.Contains(transitions[cur], next) {
			return fmt.Errorf("instance %s cannot become %s: %w", cur, next, errTransition)
		}
		if n.state.CompareAndSwap(int32(cur), int32(next)) {
			n.log.Debug("state", zap.Stringer("state", next))
			return nil
		}
	}
}
