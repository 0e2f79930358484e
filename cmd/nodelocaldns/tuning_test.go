package main

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"testing"
)

// restoreRuntime puts Go's defaults back after a test that let tune change them (they are process-wide).
func restoreRuntime(t *testing.T) {
	t.Cleanup(func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	})
}

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func cgroup(content string, err error) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		if path != cgroupMemMax {
			return nil, errors.New("unexpected path " + path)
		}
		return []byte(content), err
	}
}

func TestTuneAppliesDefaults(t *testing.T) {
	restoreRuntime(t)
	limit := 256 << 20
	got := tune(env(nil), cgroup(fmt.Sprintf("%d\n", limit), nil))
	want := tuning{GCPercent: gcPercent, MemoryLimit: int64(float64(limit) * memLimitShare)}
	if got != want {
		t.Fatalf("tune = %+v, want %+v", got, want)
	}
	if p := debug.SetGCPercent(100); p != gcPercent {
		t.Errorf("GC percent in effect = %d, want %d", p, gcPercent)
	}
	if l := debug.SetMemoryLimit(-1); l != want.MemoryLimit {
		t.Errorf("memory limit in effect = %d, want %d", l, want.MemoryLimit)
	}
}

func TestTuneLeavesRuntimeAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		cgroup func(string) ([]byte, error)
		want   tuning
	}{
		{"off", map[string]string{tuningEnv: "off"}, cgroup("1048576", nil), tuning{Off: true}},
		{"OFF", map[string]string{tuningEnv: "OFF"}, cgroup("1048576", nil), tuning{Off: true}},
		{"GOGC and GOMEMLIMIT set", map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}, cgroup("1048576", nil), tuning{}},
		{"no cgroup limit", map[string]string{"GOGC": "100"}, cgroup("max\n", nil), tuning{}},
		{"no cgroup file", map[string]string{"GOGC": "100"}, cgroup("", errors.New("no such file")), tuning{}},
		{"garbage in the cgroup file", map[string]string{"GOGC": "100"}, cgroup("lots", nil), tuning{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restoreRuntime(t)
			debug.SetGCPercent(123)
			if got := tune(env(tc.env), tc.cgroup); got != tc.want {
				t.Fatalf("tune = %+v, want %+v", got, tc.want)
			}
			if p := debug.SetGCPercent(100); p != 123 {
				t.Errorf("GC percent changed to %d", p)
			}
			if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
				t.Errorf("memory limit changed to %d", l)
			}
		})
	}
}
