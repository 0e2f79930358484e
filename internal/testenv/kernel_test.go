package testenv

import "testing"

func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"6.1.0-18-amd64", true}, {"6.18.44-fc-v1272", true}, {"7.0", true}, {"6.0.12", false},
		{"5.15.0-91-generic", false}, {"4.19.0", false}, {"garbage", false}, {"6", false},
	} {
		if got := releaseAtLeast(c.release, 6, 1); got != c.want {
			t.Errorf("releaseAtLeast(%q, 6, 1) = %v, want %v", c.release, got, c.want)
		}
	}
}
