package corefile

import (
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/render")

// Golden cases live in testdata/render/<case>/, beside this package:
//
//	params.json      Params, plus "base": a file in testdata/render/bases/ unless the case has its own
//	Corefile.base    (optional) the base template
//	kube-dns/        (optional) the kube-dns ConfigMap volume: stubDomains, upstreamNameservers, ...
//	Corefile | error the expected rendering, or the expected error text (exactly one of the two)
const goldenDir = "testdata/render"

type caseParams struct {
	Base               string   `json:"base"`
	LocalIPs           []string `json:"localIPs"`
	DNSPort            uint16   `json:"dnsPort"`
	ClusterDNS         string   `json:"clusterDNS"`
	ClusterDNSEnv      string   `json:"clusterDNSEnv"`
	PrometheusEndpoint string   `json:"prometheusEndpoint"`
}

func loadCase(t *testing.T, dir string) ([]byte, Params) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "params.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cp caseParams
	if err := json.Unmarshal(raw, &cp); err != nil {
		t.Fatalf("params.json: %v", err)
	}
	basePath := filepath.Join(dir, "Corefile.base")
	if cp.Base != "" {
		basePath = filepath.Join(goldenDir, "bases", cp.Base)
	}
	base, err := os.ReadFile(basePath)
	if err != nil {
		t.Fatal(err)
	}
	p := Params{DNSPort: cp.DNSPort, ClusterDNS: cp.ClusterDNS, ClusterDNSEnv: cp.ClusterDNSEnv,
		PrometheusEndpoint: cp.PrometheusEndpoint, Directives: testDirectives}
	for _, s := range cp.LocalIPs {
		p.LocalIPs = append(p.LocalIPs, netip.MustParseAddr(s))
	}
	return base, p
}

// renderCase is the production path: load the ConfigMap directory, then render.
func renderCase(dir string, base []byte, p Params) ([]byte, error) {
	kd, err := LoadKubeDNS(filepath.Join(dir, "kube-dns"))
	if err != nil {
		return nil, err
	}
	return Render(base, kd, p)
}

func TestRenderGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(goldenDir, "*", "params.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 15 {
		t.Fatalf("found %d golden cases under %s, want at least 15", len(dirs), goldenDir)
	}
	var nOK, nErr int
	for _, pj := range dirs {
		dir := filepath.Dir(pj)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			base, p := loadCase(t, dir)
			out, err := renderCase(dir, base, p)
			got, kind, stale := out, "Corefile", "error"
			if err != nil {
				nErr++
				// Paths in errors are relative to the case, so the golden text does not depend on the checkout.
				got, kind, stale = []byte(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")+"\n"), "error", "Corefile"
			} else {
				nOK++
				again, err := renderCase(dir, base, p)
				if err != nil || string(again) != string(out) {
					t.Fatalf("second render differs (err %v)", err)
				}
			}
			if *update {
				if err := os.WriteFile(filepath.Join(dir, kind), got, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(filepath.Join(dir, stale)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
				return
			}
			if _, err := os.Stat(filepath.Join(dir, stale)); err == nil {
				t.Fatalf("case expects a %s but Render gave a %s:\n%s", stale, kind, got)
			}
			want, err := os.ReadFile(filepath.Join(dir, kind))
			if err != nil {
				t.Fatalf("%v (run go test ./internal/corefile -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs from golden %s\n--- got ---\n%s\n--- want ---\n%s", kind, filepath.Join(dir, kind), got, want)
			}
		})
	}
	t.Logf("%d cases render, %d are refused", nOK, nErr)
}
