package preflight

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// linePrefix starts every line -print-rules writes on stderr.
const linePrefix = "nodelocaldns: preflight: "

// Missing is the findings the node lacks, in report order.
func (r Report) Missing() []Finding {
	return r.where(func(f Finding) bool { return f.Known && !f.Present })
}

func (r Report) where(keep func(Finding) bool) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if keep(f) {
			out = append(out, f)
		}
	}
	return out
}

// Lines is the report for people: one line per missing capability with its cost, then one summary line.
func (r Report) Lines() []string {
	var lines []string
	for _, f := range r.Missing() {
		lines = append(lines, fmt.Sprintf("%sMISSING %s: %s: %s (%s)", linePrefix, f.Name, f.What, f.Cost, f.Why))
	}
	present := names(r.where(func(f Finding) bool { return f.Known && f.Present }))
	unknown := names(r.where(func(f Finding) bool { return !f.Known }))
	var sum string
	switch missing := names(r.Missing()); {
	case len(missing) > 0:
		sum = fmt.Sprintf("kernel %s lacks %s; has %s", r.Release, list(missing), list(present))
	case len(unknown) > 0:
		sum = fmt.Sprintf("kernel %s has %s", r.Release, list(present))
	default:
		sum = fmt.Sprintf("kernel %s: nothing missing (%s)", r.Release, list(present))
	}
	if len(unknown) > 0 {
		sum += fmt.Sprintf("; not tried: %s (%v: needs CAP_NET_ADMIN, as the agent has; the owner flag judged by the kernel release)", list(unknown), r.NotTried)
	}
	return append(lines, linePrefix+sum)
}

// Log writes the report at start: one warning per missing capability, one info line when nothing is missing.
func (r Report) Log(log *zap.Logger) {
	for _, f := range r.Missing() {
		log.Warn("the node lacks a kernel capability", zap.String("capability", f.Name), zap.String("what", f.What),
			zap.String("cost", f.Cost), zap.String("why", f.Why), zap.String("kernel", r.Release))
	}
	unknown := names(r.where(func(f Finding) bool { return !f.Known }))
	if len(unknown) > 0 {
		log.Warn("kernel capabilities not tried", zap.Strings("capabilities", unknown), zap.Error(r.NotTried))
	}
	if len(r.Missing()) == 0 && len(unknown) == 0 {
		log.Info("the node has every kernel capability the agent uses", zap.Strings("capabilities", names(r.Findings)),
			zap.String("kernel", r.Release))
	}
}

// Export sets g (nodelocaldns_node_capability{name}) to 1 for each capability present, 0 for each missing,
// and leaves out those not tried.
func (r Report) Export(g *prometheus.GaugeVec) {
	if g == nil {
		return
	}
	g.Reset()
	for _, f := range r.where(func(f Finding) bool { return f.Known }) {
		v := 0.0
		if f.Present {
			v = 1
		}
		g.WithLabelValues(f.Name).Set(v)
	}
}

func names(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
