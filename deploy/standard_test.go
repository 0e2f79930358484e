package deploy

import (
	"io"
	"os"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodelocaldns/nodelocaldns/internal/options"
)

// standardArgs is one entry of testdata/standard-args.yaml.
type standardArgs struct {
	Name     string   `json:"name"`
	Args     []string `json:"args"`
	LocalIPs []string `json:"localIPs"`
}

func readStandardArgs(t *testing.T) []standardArgs {
	t.Helper()
	b, err := os.ReadFile("testdata/standard-args.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []standardArgs
	if err := yaml.UnmarshalStrict(b, &cases); err != nil {
		t.Fatalf("testdata/standard-args.yaml: %v", err)
	}
	if len(cases) == 0 {
		t.Fatal("testdata/standard-args.yaml has no cases")
	}
	return cases
}

// TestStandardArgsAccepted: an operator who only swaps the image keeps node-cache's args, and they mean the same.
func TestStandardArgsAccepted(t *testing.T) {
	for _, tc := range readStandardArgs(t) {
		t.Run(tc.Name, func(t *testing.T) {
			o, err := options.Parse(tc.Args, io.Discard)
			if err != nil {
				t.Fatalf("options.Parse(%q): %v", tc.Args, err)
			}
			var ips []string
			for _, ip := range o.LocalIPs {
				ips = append(ips, ip.String())
			}
			if o.Mode != options.ModeServe || !slices.Equal(ips, tc.LocalIPs) || o.Corefile != "/etc/Corefile" ||
				o.UpstreamSvc != "kube-dns-upstream" || o.BaseCorefile != "/etc/coredns/Corefile.base" {
				t.Errorf("parsed %q as mode %v localip %q conf %q upstreamsvc %q basecorefile %q; want serve, %q, /etc/Corefile, kube-dns-upstream, /etc/coredns/Corefile.base",
					tc.Args, o.Mode, ips, o.Corefile, o.UpstreamSvc, o.BaseCorefile, tc.LocalIPs)
			}
		})
	}
}
