package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// rollUntil rolls the chart's DaemonSet under the conformance suite: helm upgrade --wait to the second build of
// ours, then back to the first, and so on until stop is closed (the suite has ended). Each upgrade replaces the
// agent on both nodes, one after the other (the chart's rolling update), so the suite's pods resolve through
// one rollout after another. An upgrade under way when the suite ends is finished, not cut short. It fails if an
// upgrade fails, or if the suite ended before a single rollout completed under it.
func rollUntil(ctx context.Context, h *helmRun, r *results, stop <-chan struct{}) error {
	builds := []struct{ tag, values string }{
		{ourImageRepo + ":" + upgradeTag, fmt.Sprintf("image: {tag: %s}\n", upgradeTag)},
		{"", ""}, // the chart's default image (the build under test)
	}
	var took []time.Duration
	var errs []error
	for i := 0; ; i++ {
		select {
		case <-stop:
			return rollingVerdict(r, took, errs)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		b := builds[i%len(builds)]
		v, err := h.values(helmClusterValues, b.values)
		if err != nil {
			return err
		}
		start := time.Now()
		err = h.upgradeRolledOut(ctx, v)
		if err == nil && b.tag != "" {
			if err = onlyImage(ctx, h.c, b.tag); err != nil {
				err = fmt.Errorf("%w\n%s", err, dsState(ctx, h.c))
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("upgrade %d: %w", i+1, err))
			continue
		}
		took = append(took, time.Since(start))
	}
}

// upgradeRolledOut is helm upgrade --wait (2 min, inside a node command's 3, so that a stall is helm's own
// error) with values v, once the DaemonSet has rolled out as kubectl sees it; a failure carries the DaemonSet's
// state. helm's --wait returns once the new pods are ready, before they are available (the chart's
// minReadySeconds), and an upgrade begun before the rollout ended stalled: the new pods ran beside the old
// ones, which were never deleted, until helm gave up (the rolling run; the gate case, after node-1's agent
// was restarted, in a CI run).
func (h *helmRun) upgradeRolledOut(ctx context.Context, v []string) error {
	if _, err := h.c.kubectl(ctx, "-n", helmNamespace, "rollout", "status", "ds/node-local-dns", "--timeout=90s"); err != nil {
		return fmt.Errorf("before the upgrade: %w\n%s", err, dsState(ctx, h.c))
	}
	if _, err := h.run(ctx, append([]string{"upgrade", helmRelease, h.chart(), "-n", helmNamespace, "--wait", "--timeout", "2m"}, v...)...); err != nil {
		return fmt.Errorf("%w\n%s", err, dsState(ctx, h.c))
	}
	return nil
}

// dsState is the DaemonSet's status and its pods, for a failed upgrade's message.
func dsState(ctx context.Context, c *cluster) string {
	st, _ := c.kubectl(ctx, "-n", helmNamespace, "get", "ds", "node-local-dns", "-o", "jsonpath={.status}")
	pods, _ := c.kubectl(ctx, "-n", helmNamespace, "get", "pods", "-l", "k8s-app=node-local-dns", "-o", "wide")
	return "DaemonSet status: " + st + "\n" + pods
}

// onlyImage: once the upgrade has waited, every agent pod runs image.
func onlyImage(ctx context.Context, c *cluster, image string) error {
	var imgs []string
	err := poll(ctx, 60*time.Second, time.Second, func() (bool, error) {
		var err error
		imgs, err = agentImages(ctx, c)
		return err == nil && slices.Equal(imgs, []string{image}), err
	})
	if err != nil {
		return fmt.Errorf("cache pods run %q, want only %s: %w", imgs, image, err)
	}
	return nil
}

func rollingVerdict(r *results, took []time.Duration, errs []error) error {
	var s []string
	for _, d := range took {
		s = append(s, fmt.Sprintf("%.1f", d.Seconds()))
	}
	r.figure("helm upgrades completed under the suite (each took, s)", "%d (%s)", len(took), strings.Join(s, ", "))
	if len(took) == 0 {
		errs = append(errs, errors.New("the suite ended before one upgrade completed under it"))
	}
	return errors.Join(errs...)
}
