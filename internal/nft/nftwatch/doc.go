// Package nftwatch reads the kernel's nftables notifications (NFNLGRP_NFTABLES) and says when a reconcile
// pass should look: a change inside our tables, a table deleted, a base chain of another table that may drop
// or notrack our traffic added, removed or re-declared. It only reads: its sockets are its own (the
// subscription, filtered by a BPF program before anything reaches user space, and a short-lived one for the
// one chain dump at subscribe time), and it never sends a request that changes the ruleset.
//
// May touch: nftables, read-only, over netlink sockets of its own (with /proc/self/ns/pid to tell its own commits).
package nftwatch
