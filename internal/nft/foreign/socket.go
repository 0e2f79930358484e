package foreign

import (
	"time"

	"github.com/google/nftables"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nlsock"
)

// socket is what a look at other tables sends: dumps, and the deletion of node-cache's rules.
type socket interface {
	ListChains() ([]*nftables.Chain, error)
	GetRules(*nftables.Table, *nftables.Chain) ([]*nftables.Rule, error)
	DelRule(*nftables.Rule) error
	Flush() error
	Discard()
}

// withSocket runs f on a socket opened for it and closed after, every request under one deadline
// ([nlsock.RequestTimeout]).
func withSocket(f func(socket) error) error {
	s, err := nlsock.Open()
	if err != nil {
		return err
	}
	defer s.CloseLasting()
	if err := s.SetDeadline(time.Now().Add(nlsock.RequestTimeout)); err != nil {
		return err
	}
	return f(s)
}

// Tables is the package's reading of other tables as a value, for callers that hold it behind an interface.
type Tables struct{}

// Scan is [Scan].
func (Tables) Scan(ours ...string) ([]Chain, error) { return Scan(ours...) }

// RemoveNodeCacheRules is [RemoveNodeCacheRules].
func (Tables) RemoveNodeCacheRules(s nft.Spec) ([]string, error) { return RemoveNodeCacheRules(s) }
