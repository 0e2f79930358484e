package corefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

// testenv.WriteConfigMap as LoadKubeDNS sees it: keys read through the symlinks, old generation gone.
func TestWriteConfigMapHelper(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-dns")
	testenv.WriteConfigMap(t, dir, map[string]string{keyStubDomains: `{"a.example": ["192.0.2.1"]}`, "gone": "x"})
	testenv.WriteConfigMap(t, dir, map[string]string{keyStubDomains: `{"b.example": ["192.0.2.2"]}`})
	kd, err := LoadKubeDNS(dir)
	if err != nil || len(kd.StubDomains) != 1 || kd.StubDomains["b.example"] == nil {
		t.Fatalf("LoadKubeDNS = %+v, %v; want b.example only", kd, err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 3 || names[2] != keyStubDomains || !strings.HasPrefix(names[0], "..2") || names[1] != "..data" {
		t.Fatalf("directory holds %q, want one ..<timestamp> dir, ..data and %s", names, keyStubDomains)
	}
}
