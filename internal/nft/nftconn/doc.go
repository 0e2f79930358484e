// Package nftconn is an instance's owning netlink socket to nftables, and what it writes over it: the values
// of package nft, programmed.
//
// [Open] dials one lasting socket. [Conn.Apply] creates the instance table on it with NFT_TABLE_F_OWNER (the
// first free instance name) and then replaces the table's contents in one batch: remove the contents, add the
// new ones, one commit, so packets see the old table or the new one, never a gap. The kernel deletes the table
// the moment the socket closes (exit, crash, SIGKILL), and no other process, root included, can change or
// delete it; `nft flush ruleset` skips it. So nothing reads our table back to compare: nobody else can change
// it. [Conn.Leave] swaps it for a drain table in one batch, [Conn.Teardown] deletes it. [Conn.Instances]
// lists every instance's table (their sets say which addresses each needs on the shared interface, their
// chains that it serves), [Conn.DeleteLegacy] deletes what versions before owned tables left, and
// [Conn.TableCounters] reads our rules' counters for a scrape.
//
// [FallbackTable] writes the link-local fallback's table over the same socket (nft/nftwatch recognises our
// own writes by its port), though the table is not owned: it outlives the socket, so [FallbackTable.InSync]
// reads it back. Each job reaches the socket through an interface of its own size (ops.go: txOps, readOps,
// sockOps); none of them can dump the node's chains (listing.go). Every request runs under a deadline
// ([RequestTimeout]).
//
// May touch: nftables tables named nodelocaldns* (nft's names.go), over its one socket.
package nftconn
