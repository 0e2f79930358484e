package testenv

import (
	"errors"
	"testing"
	"time"
)

// pollEvery is how often Eventually looks: short beside any timeout a test uses, long enough not to compete for
// the CPU with what it waits for.
const pollEvery = 2 * time.Millisecond

// Eventually polls cond until it holds and returns how long that took, or fails t once timeout has passed,
// naming what it waited for. The timeout only bounds a failing test; a passing one returns as soon as cond holds.
// It is the one "wait until or time out" of the tests; prefer a readiness signal (a channel, a log line) where the
// code under test gives one.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return EventuallyNil(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// EventuallyNil is [Eventually] for a check that says why it does not hold yet: the failure carries the last
// reason.
func EventuallyNil(t testing.TB, timeout time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			t.Fatalf("%s: not within %v; last: %v", what, timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

var errNotYet = errors.New("condition not met")
