package volume

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cm")
	if keys, err := Read(dir); err != nil || len(keys) != 0 {
		t.Fatalf("Read of a missing directory = %v, %v; want empty", keys, err)
	}
	testenv.WriteConfigMap(t, dir, map[string]string{"a": "1", "b": "2"})
	testenv.WriteConfigMap(t, dir, map[string]string{"a": "one", "c": "3"}) // ..data swapped, b dropped
	// testenv.WriteConfigMap lays the volume out as the kubelet does: one ..<timestamp> dir, ..data, the keys.
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 4 || !strings.HasPrefix(names[0], "..2") || names[1] != "..data" || names[2] != "a" || names[3] != "c" {
		t.Fatalf("directory holds %q, want one ..<timestamp> dir, ..data, a and c", names)
	}
	if err := os.Symlink("..data/gone", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	keys, err := Read(dir)
	want := map[string][]byte{"a": []byte("one"), "c": []byte("3")}
	if err != nil || !maps.EqualFunc(keys, want, bytes.Equal) {
		t.Errorf("Read = %q, %v; want %q (dot entries, a dangling key and a directory left out)", keys, err, want)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(f); err == nil {
		t.Error("Read of a file succeeded")
	}
}
