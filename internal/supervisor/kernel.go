package supervisor

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/foreign"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
)

// kernel owns the agent's two netlink handles for their whole life: our nftables socket (which owns our table:
// closing it is what removes the table if nothing else did) and the link manager. The objects that act on them
// (node, the reconcile watchers, the foreign report, the rule counters) borrow them at construction.
type kernel struct {
	conn  *nftconn.Conn // nil: the agent touches no kernel state at all
	links *link.Manager // nil: -setupinterface=false
	m     *metrics.Metrics
}

// newKernel opens our nftables socket (always, when we manage anything: even without interception our table
// is how other instances know which addresses we need) and, with -setupinterface, the link manager. Without
// either flag it opens nothing.
func newKernel(log *zap.Logger, m *metrics.Metrics, manage, setupInterface bool) (*kernel, error) {
	k := &kernel{m: m}
	if !manage {
		return k, nil
	}
	var err error
	if k.conn, err = nftconn.Open(nftconn.WithLogger(log)); err != nil {
		return nil, fmt.Errorf("open nftables: %w", err)
	}
	// Scrapes read our rules' counters through this same socket: it owns our table, whatever its name.
	m.RuleCounters.SetSource(k.ruleCounters)
	if setupInterface {
		if k.links, err = link.New(log); err != nil {
			k.close()
			return nil, fmt.Errorf("open link manager: %w", err)
		}
	}
	return k, nil
}

func (k *kernel) close() {
	if k.conn != nil {
		k.m.RuleCounters.SetSource(nil)
		k.conn.Close()
	}
	if k.links != nil {
		k.links.Close()
	}
}

var (
	_ instance.Registry    = (*nftconn.Conn)(nil)
	_ instance.LinkManager = (*link.Manager)(nil)
)

// registry is the nftables socket as the instance sees it: a nil interface, not a nil pointer, when there is none.
func (k *kernel) registry() instance.Registry {
	if k.conn == nil {
		return nil
	}
	return k.conn
}

// linkManager is the link manager as the instance sees it: a nil interface when there is none.
func (k *kernel) linkManager() instance.LinkManager {
	if k.links == nil {
		return nil
	}
	return k.links
}

// foreignTables is the reading of other tables, on sockets of its own, and our table's name, which it leaves
// out: nil when the agent manages no nftables.
func (k *kernel) foreignTables() (foreignTables, func() string) {
	if k.conn == nil {
		return nil, nil
	}
	return foreign.Tables{}, k.conn.Table
}

// fallbackTable is the fallback table's writer, on our owning socket: nil when there is none.
func (k *kernel) fallbackTable() fallbackTable {
	if k.conn == nil {
		return nil
	}
	return k.conn.Fallback()
}

// counterReader is what a scrape reads our rule counters through ([*nftconn.Conn]): reads only.
type counterReader interface {
	Table() string
	TableCounters(table string, chains ...string) ([]nftconn.RuleCounter, error)
}

var _ counterReader = (*nftconn.Conn)(nil)

// ruleCounters reads our table's rule counters for a scrape.
func (k *kernel) ruleCounters() ([]metrics.RuleCounter, error) { return readRuleCounters(k.conn) }

func readRuleCounters(c counterReader) ([]metrics.RuleCounter, error) {
	rcs, err := c.TableCounters(c.Table(), nft.OurChains()...)
	if err != nil {
		return nil, err
	}
	out := make([]metrics.RuleCounter, len(rcs))
	for i, rc := range rcs {
		out[i] = metrics.RuleCounter{Chain: rc.Chain, Comment: rc.Comment, Packets: rc.Packets, Bytes: rc.Bytes}
	}
	return out, nil
}
