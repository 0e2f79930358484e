package dnscache

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coredns/caddy"
)

// parseServeStale reads `serve_stale [DURATION] [immediate [RESPONSE_TTL [FAILURE_RECHECK]] | verify
// [VERIFY_TIMEOUT [RESPONSE_TTL [FAILURE_RECHECK]]]]`; each occurrence starts from the defaults (1h,
// immediate, TTL 0, no recheck).
func parseServeStale(c *caddy.Controller, ca *Cache) error {
	args := c.RemainingArgs()
	if len(args) > 5 {
		return c.ArgErr()
	}
	ca.staleUpTo, ca.staleTTL, ca.staleRecheck = time.Hour, 0, 0
	ca.verifyStale, ca.verifyTimeout = false, 0
	if len(args) > 0 {
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return err
		}
		if d < 0 {
			return errors.New("invalid negative duration for serve_stale")
		}
		ca.staleUpTo = d
	}
	if len(args) < 2 {
		return nil
	}
	mode := strings.ToLower(args[1])
	if mode != "immediate" && mode != "verify" {
		return fmt.Errorf("invalid value for serve_stale refresh mode: %s", mode)
	}
	ca.verifyStale = mode == "verify"
	rest := args[2:]
	if ca.verifyStale && len(rest) > 0 {
		t, err := time.ParseDuration(rest[0])
		if err != nil {
			return fmt.Errorf("invalid serve_stale verify timeout: %w", err)
		}
		if t < 0 {
			return errors.New("invalid negative timeout for serve_stale verify")
		}
		ca.verifyTimeout = t
		rest = rest[1:]
	} else if !ca.verifyStale && len(rest) > 2 {
		return c.ArgErr()
	}
	var err error
	if len(rest) > 0 {
		if ca.staleTTL, err = parseStaleTTL(rest[0]); err != nil {
			return err
		}
	}
	if len(rest) > 1 {
		if ca.staleRecheck, err = parseStaleRecheck(rest[1]); err != nil {
			return err
		}
	}
	return nil
}

func parseStaleTTL(value string) (time.Duration, error) {
	ttl, err := time.ParseDuration(value)
	switch {
	case err != nil:
		return 0, fmt.Errorf("invalid serve_stale response TTL: %w", err)
	case ttl < 0:
		return 0, errors.New("invalid negative response TTL for serve_stale")
	case ttl%time.Second != 0:
		return 0, errors.New("serve_stale response TTL must be a whole number of seconds")
	case ttl/time.Second > time.Duration(^uint32(0)):
		return 0, errors.New("serve_stale response TTL exceeds the DNS TTL range")
	}
	return ttl, nil
}

func parseStaleRecheck(value string) (time.Duration, error) {
	d, err := time.ParseDuration(value)
	switch {
	case err != nil:
		return 0, fmt.Errorf("invalid serve_stale failure recheck: %w", err)
	case d < 0:
		return 0, errors.New("invalid negative failure recheck for serve_stale")
	case d > 5*time.Minute:
		return 0, errors.New("serve_stale failure recheck cannot exceed 5 minutes")
	}
	return d, nil
}
