package configwatch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func TestDirHash(t *testing.T) {
	root := t.TempDir()
	h := func(dir string) string {
		t.Helper()
		s, err := dirHash(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	missing, empty := filepath.Join(root, "missing"), filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if h(missing) != h(empty) {
		t.Error("a missing directory must hash like an empty one (both mean: no ConfigMap)")
	}

	dir := filepath.Join(root, "cm")
	testenv.WriteConfigMap(t, dir, map[string]string{"a": "1", "b": "2"})
	first := h(dir)
	if first == h(empty) {
		t.Fatal("content not hashed")
	}
	testenv.WriteConfigMap(t, dir, map[string]string{"a": "1", "b": "2"})
	if h(dir) != first {
		t.Error("an identical rewrite (new ..<timestamp> dir, ..data swapped) changed the hash")
	}
	for name, mutate := range map[string]func(string){
		"dot entry":        func(d string) { write(t, d, ".hidden", "x") },
		"sub directory":    func(d string) { os.Mkdir(filepath.Join(d, "sub"), 0o755) },
		"dangling symlink": func(d string) { os.Symlink("..data/nope", filepath.Join(d, "nope")) },
	} {
		mutate(dir)
		if h(dir) != first {
			t.Errorf("%s changed the hash", name)
		}
	}
	testenv.WriteConfigMap(t, dir, map[string]string{"a": "1", "b": "3"})
	if h(dir) == first {
		t.Error("a changed value behind the ..data symlink was not seen")
	}
	second := h(dir)
	testenv.WriteConfigMap(t, dir, map[string]string{"a": "1", "c": "3"})
	if h(dir) == second {
		t.Error("a renamed key was not seen")
	}
}
