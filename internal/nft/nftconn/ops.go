package nftconn

import (
	"time"

	"github.com/google/nftables"

	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// The socket as each job of Conn uses it: one small interface per job, as knftables' Interface is small. txOps
// writes (a batch is queued, then sent whole), readOps reads our objects by name, sockOps is the socket's own
// life. kernelOps (below) is all three on one socket, as the owned table needs: it lives exactly as long as
// the socket that created it, and every write to it must come through that socket. fakeKernel (fake_test.go)
// stands in for it in unit tests. Nothing here can dump the node's chains (listing.go says why).

// txOps queues nf_tables messages and sends them as one batch: Flush commits all of them or none.
type txOps interface {
	AddTable(*nftables.Table) *nftables.Table
	DelTable(*nftables.Table)
	AddSet(*nftables.Set, []nftables.SetElement) error
	DelSet(*nftables.Set)
	AddChain(*nftables.Chain) *nftables.Chain
	DelChain(*nftables.Chain)
	FlushChain(*nftables.Chain)
	AddRule(*nftables.Rule) *nftables.Rule
	Flush() error
	// Discard drops whatever the socket still holds after a failed batch (acknowledgements the library
	// stopped reading), so the next request reads its own answer.
	Discard()
}

// readOps asks the kernel for tables of a family, or for one table's objects by name.
type readOps interface {
	ListTablesOfFamily(nftables.TableFamily) ([]*nftables.Table, error)
	ListChain(*nftables.Table, string) (*nftables.Chain, error)
	GetSets(*nftables.Table) ([]*nftables.Set, error)
	GetSetElements(*nftables.Set) ([]nftables.SetElement, error)
	// GetRules is the library's, but for `ct original ...`, which the library cannot decode (nlsock/getrules.go).
	GetRules(*nftables.Table, *nftables.Chain) ([]*nftables.Rule, error)
}

// sockOps is the lasting socket itself.
type sockOps interface {
	// CreateOwnedTable creates table inet name with NFT_TABLE_F_OWNER, failing with EEXIST when the name is
	// taken, on the socket every other call uses: the table lives exactly as long as that socket.
	CreateOwnedTable(name string) error
	// SetDeadline bounds the next requests (see RequestTimeout).
	SetDeadline(time.Time) error
	CloseLasting() error
}

// nftOps is the three on one socket.
type nftOps interface {
	txOps
	readOps
	sockOps
}

// kernelOps is our owning socket ([nlsock.Socket]) plus the raw NEWTABLE google/nftables cannot send: v0.3.0's
// AddTable always sends NFTA_TABLE_FLAGS 0, and the kernel refuses to change the flags of an owned table
// (EOPNOTSUPP), so the table is created here and never passed to AddTable again.
type kernelOps struct {
	*nlsock.Socket
}

func (k *kernelOps) CreateOwnedTable(name string) error {
	table, err := nlsock.NewTableMsg(name, nlsock.TableFlagOwner)
	if err != nil {
		return err
	}
	return k.SendBatch(table)
}
