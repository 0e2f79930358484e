package nodetaint

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
)

// API is what the Remover needs of the API server; *Client has it.
type API interface {
	Taints(ctx context.Context, node string) ([]Taint, error)
	PatchTaints(ctx context.Context, node string, from, to []Taint) error
}

var _ API = (*Client)(nil)

// Backoff between failed attempts, doubling from the first to the last: an API server that is not reachable
// yet (kube-proxy not up on a fresh node, a control plane restarting) is asked again soon, a refusal (RBAC)
// not often.
const (
	FirstRetry = 500 * time.Millisecond
	LastRetry  = 30 * time.Second
)

// Remover takes the taint Key off the node Node, once.
type Remover struct {
	API  API
	Node string
	Key  string
	Log  *zap.Logger
	// First and Last bound the wait between failed attempts (FirstRetry and LastRetry when zero).
	First, Last time.Duration
	// Sleep waits d or until ctx is done, and says whether it waited; nil is a timer. Tests record the waits.
	Sleep func(ctx context.Context, d time.Duration) bool
}

// Run tries until the node carries no taint with the key (taken off here, or found without it) or ctx is done.
// Every failure is logged and retried with backoff; none ends the agent, which serves DNS meanwhile. Run
// returns after its one success and never puts the taint back.
func (r *Remover) Run(ctx context.Context) {
	first, last, sleep := r.First, r.Last, r.Sleep
	if first <= 0 {
		first = FirstRetry
	}
	if last < first {
		last = max(LastRetry, first)
	}
	if sleep == nil {
		sleep = timerSleep
	}
	start := time.Now()
	wait := first
	for attempt := 1; ; attempt++ {
		removed, err := r.once(ctx)
		if err == nil {
			msg := "start-up taint removed"
			if !removed {
				msg = "start-up taint not on the node"
			}
			r.Log.Info(msg, zap.String("node", r.Node), zap.String("key", r.Key), zap.Int("attempts", attempt),
				zap.Duration("elapsed", time.Since(start)))
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.Log.Warn("remove start-up taint; retrying", zap.String("node", r.Node), zap.String("key", r.Key),
			zap.Int("attempt", attempt), zap.Duration("retry", wait), zap.String("hint", hint(err)), zap.Error(err))
		if !sleep(ctx, wait) {
			return
		}
		wait = min(2*wait, last)
	}
}

// once reads the node's taints and, if ours is among them, patches them without it. removed says whether it
// was there.
func (r *Remover) once(ctx context.Context) (removed bool, err error) {
	taints, err := r.API.Taints(ctx, r.Node)
	if err != nil {
		return false, err
	}
	keep, found := Without(taints, r.Key)
	if !found {
		return false, nil
	}
	return true, r.API.PatchTaints(ctx, r.Node, taints, keep)
}

// Without is taints without those of key (any effect), and whether there were any.
func Without(taints []Taint, key string) (keep []Taint, found bool) {
	keep = []Taint{}
	for _, t := range taints {
		if t.Key() == key {
			found = true
			continue
		}
		keep = append(keep, t)
	}
	return keep, found
}

// hint says what an API server's refusal usually means here.
func hint(err error) string {
	var st *StatusError
	if !errors.As(err, &st) {
		return "the API server is not reachable yet, or its certificate is not the service account's CA's"
	}
	if strings.Contains(st.Message, "ValidatingAdmissionPolicy") { // 422 or 403, as the policy's reason says
		return "an admission policy refused the patch: the chart's startupTaint policy allows only removing this taint from the node the pod runs on ($NODE_NAME must be the downward API's spec.nodeName)"
	}
	switch st.Code {
	case http.StatusUnauthorized:
		return "the service account token was refused"
	case http.StatusForbidden:
		return "the service account may not get and patch nodes: the chart's startupTaint RBAC (ClusterRole) is missing"
	case http.StatusNotFound:
		return "no node of this name: $NODE_NAME should be the downward API's spec.nodeName"
	case http.StatusUnprocessableEntity, http.StatusConflict:
		return "the node's taints changed since they were read; reading them again"
	}
	return ""
}

func timerSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
