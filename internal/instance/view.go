package instance

import "time"

// What the supervisor reads of the instance, and the one hook it sets.

// SetQuiesce sets how the last instance out lets the queries already steered to it be answered before the
// interface goes (see [Node.Leave]); without it, Leave waits out its drain.
func (n *Node) SetQuiesce(quiesce func(drain time.Duration)) { n.quiesce = quiesce }

// Serving says whether the instance serves now.
func (n *Node) Serving() bool { return n.current() == stateServing }

// Gated says whether our rules are gated on a live listener (the kernel took the socket expression).
func (n *Node) Gated() bool { return n.gated.Load() }

// Others is how many live instances besides us the last look at the instance tables saw.
func (n *Node) Others() int32 { return n.others.Load() }

// LinkName is our interface's name.
func (n *Node) LinkName() string { return n.link.Name }
