// Package instance is this agent's instance on the node: the state machine of its life (state.go), what its
// own table holds at each step (program.go), and every decision about the node's shared kernel state from the
// tables the other instances own (node.go: which addresses the interface carries, who is last out, readiness).
// It reaches the kernel only through the handles it is given ([Registry], [LinkManager]); the supervisor opens
// them and drives the steps in order.
//
// May touch: the kernel state behind the handles it is given (our table, the shared interface).
package instance
