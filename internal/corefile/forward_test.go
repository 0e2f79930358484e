package corefile

import (
	"slices"
	"strings"
	"testing"
)

func TestBoundForwards(t *testing.T) {
	const opts = "max_concurrent 250\n        failfast_all_unhealthy_upstreams\n"
	for _, tc := range []struct {
		name, in, want string
		n              int
	}{
		{"no block", ".:53 {\n    forward . /etc/resolv.conf\n}\n",
			".:53 {\n    forward . /etc/resolv.conf {\n        " + opts + "    }\n}\n", 1},
		{"no block, comment kept", ".:53 {\n    forward . 192.0.2.1 # kube-dns\n}\n",
			".:53 {\n    forward . 192.0.2.1 { # kube-dns\n        " + opts + "    }\n}\n", 1},
		{"block, its indentation", "a:53 {\n    forward . 192.0.2.1 {\n            force_tcp\n    }\n}\n",
			"a:53 {\n    forward . 192.0.2.1 {\n            max_concurrent 250\n            failfast_all_unhealthy_upstreams\n            force_tcp\n    }\n}\n", 1},
		{"empty block", "a:53 {\n    forward . 192.0.2.1 {\n    }\n}\n",
			"a:53 {\n    forward . 192.0.2.1 {\n        " + opts + "    }\n}\n", 1},
		{"user's max_concurrent", "a:53 {\n    forward . 192.0.2.1 {\n        max_concurrent 0\n    }\n}\n",
			"a:53 {\n    forward . 192.0.2.1 {\n        max_concurrent 0\n    }\n}\n", 0},
		{"user's failfast", "a:53 {\n    forward . 192.0.2.1 {\n        failfast_all_unhealthy_upstreams\n    }\n}\n",
			"a:53 {\n    forward . 192.0.2.1 {\n        failfast_all_unhealthy_upstreams\n    }\n}\n", 0},
		{"two blocks, one bounded", "a:53 {\n    forward . 192.0.2.1\n}\nb:53 {\n    forward . 192.0.2.2 {\n        max_concurrent 9\n    }\n}\n",
			"a:53 {\n    forward . 192.0.2.1 {\n        " + opts + "    }\n}\nb:53 {\n    forward . 192.0.2.2 {\n        max_concurrent 9\n    }\n}\n", 1},
		{"two forwards in a block", "a:53 {\n    forward x.a 192.0.2.1\n    forward . 192.0.2.2\n}\n",
			"a:53 {\n    forward x.a 192.0.2.1 {\n        " + opts + "    }\n    forward . 192.0.2.2 {\n        " + opts + "    }\n}\n", 2},
		{"on the server block's line", ".:53 { forward . 192.0.2.1\n}\n",
			".:53 { forward . 192.0.2.1 {\n    " + strings.ReplaceAll(opts, "        ", "    ") + "}\n}\n", 1},
		{"quoted line left alone", ".:53 {\n    forward \".\" 192.0.2.1\n}\n", ".:53 {\n    forward \".\" 192.0.2.1\n}\n", 0},
		{"snippet edited once", "(f) {\n    forward . 192.0.2.1\n}\na:53 {\n    import f\n}\nb:53 {\n    import f\n}\n",
			"(f) {\n    forward . 192.0.2.1 {\n        " + opts + "    }\n}\na:53 {\n    import f\n}\nb:53 {\n    import f\n}\n", 1},
		{"no forward", ".:53 {\n    whoami\n}\n", ".:53 {\n    whoami\n}\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := BoundForwards([]byte(tc.in), testDirectives)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want || n != tc.n {
				t.Errorf("got %d bounded:\n%s\nwant %d:\n%s", n, got, tc.n, tc.want)
			}
		})
	}
}

func TestBoundForwardsRefusesWhatDoesNotParse(t *testing.T) {
	if _, _, err := BoundForwards([]byte(".:53 {\n    forward . 192.0.2.1 {\n"), testDirectives); err == nil {
		t.Error("an unclosed block was accepted")
	}
}

// With fairshare in the directive list, a block where a forward is bounded gets one fairshare line, before its
// first bounded forward that begins its line, unless it has one.
func TestBoundForwardsAddsFairshare(t *testing.T) {
	dirs := slices.Insert(slices.Clone(testDirectives), slices.Index(testDirectives, "forward"), "fairshare")
	const opts = "max_concurrent 250\n        failfast_all_unhealthy_upstreams\n"
	for _, tc := range []struct{ name, in, want string }{
		{"no block", ".:53 {\n    forward . /etc/resolv.conf\n}\n",
			".:53 {\n    fairshare 250\n    forward . /etc/resolv.conf {\n        " + opts + "    }\n}\n"},
		{"block", "a:53 {\n    forward . 192.0.2.1 {\n        force_tcp\n    }\n}\n",
			"a:53 {\n    fairshare 250\n    forward . 192.0.2.1 {\n        " + opts + "        force_tcp\n    }\n}\n"},
		{"two forwards, one fairshare", "a:53 {\n    forward x.a 192.0.2.1\n    forward . 192.0.2.2\n}\n",
			"a:53 {\n    fairshare 250\n    forward x.a 192.0.2.1 {\n        " + opts + "    }\n    forward . 192.0.2.2 {\n        " + opts + "    }\n}\n"},
		{"user's fairshare kept", "a:53 {\n    fairshare 9\n    forward . 192.0.2.1\n}\n",
			"a:53 {\n    fairshare 9\n    forward . 192.0.2.1 {\n        " + opts + "    }\n}\n"},
		{"user's max_concurrent: no fairshare either", "a:53 {\n    forward . 192.0.2.1 {\n        max_concurrent 0\n    }\n}\n",
			"a:53 {\n    forward . 192.0.2.1 {\n        max_concurrent 0\n    }\n}\n"},
		{"on the server block's line: no fairshare", ".:53 { forward . 192.0.2.1\n}\n",
			".:53 { forward . 192.0.2.1 {\n    " + strings.ReplaceAll(opts, "        ", "    ") + "}\n}\n"},
		{"snippet", "(f) {\n    forward . 192.0.2.1\n}\na:53 {\n    import f\n}\nb:53 {\n    import f\n}\n",
			"(f) {\n    fairshare 250\n    forward . 192.0.2.1 {\n        " + opts + "    }\n}\na:53 {\n    import f\n}\nb:53 {\n    import f\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := BoundForwards([]byte(tc.in), dirs)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
