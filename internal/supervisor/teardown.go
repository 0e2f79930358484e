package supervisor

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/nodelocaldns/nodelocaldns/internal/desired"
	"github.com/nodelocaldns/nodelocaldns/internal/instance"
	"github.com/nodelocaldns/nodelocaldns/internal/link"
	"github.com/nodelocaldns/nodelocaldns/internal/metrics"
	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/nft/nftconn"
	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// Teardown is `-teardown`: what node.leave does for a stopping instance, for a node with no instance of ours
// running in this process. It deletes tables left by earlier versions and removes the interface unless a live
// instance's table says the interface is still needed; with no instance left it also deletes the link-local
// fallback, which nothing else removes (an uninstall runs this on every node). What it removes is named by
// the desired state of o (internal/desired), as the agent's own leaving is: the interface of -interfacename,
// whatever -setupinterface says, for an uninstall cleans up after any earlier run.
func Teardown(o *options.Options, log *zap.Logger) error {
	st := TeardownState(o)
	c, err := nftconn.Open(nftconn.WithLogger(log))
	if err != nil {
		return fmt.Errorf("open nftables: %w", err)
	}
	defer c.Close()
	lm, err := link.New(log)
	if err != nil {
		return fmt.Errorf("open link manager: %w", err)
	}
	defer lm.Close()
	// -teardown serves no metrics: what leaving counts goes into a registry nobody reads.
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		return err
	}
	return teardown(log, instance.New(log.Named("node"), m, st.NFT, st.Link, c, lm), c.Fallback())
}

// TeardownState is the desired state -teardown leaves by: [desired.Of] of its flags, with no facts (it reads
// neither the environment nor the kernel's capabilities, and has no -localip: the state is not validated).
func TeardownState(o *options.Options) desired.State { return desired.Of(o, desired.Facts{}) }

// teardown leaves the node for a process that never joined it, then deletes the fallback table if nobody is
// left to need it. Its error names what it could not remove.
func teardown(log *zap.Logger, n *instance.Node, fb fallbackTable) error {
	othersRemain, err := n.Leave(false, 0)
	if err != nil {
		return fmt.Errorf("teardown incomplete: %w", err)
	}
	if othersRemain {
		log.Info("live instances remain; the interface and the link-local fallback stay", zap.String("interface", n.LinkName()))
		return nil
	}
	had, err := removeFallback(fb, drainDelay, clock.RealClock{})
	if err != nil {
		return fmt.Errorf("teardown incomplete: table inet %s left in place: %w", nft.FallbackTableName, err)
	}
	if had {
		log.Info("deleted the link-local fallback", zap.String("table", "inet "+nft.FallbackTableName))
	}
	return nil
}
