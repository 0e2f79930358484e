package testenv

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// WriteConfigMap updates dir exactly as the kubelet's AtomicWriter (kubernetes pkg/volume/util/atomic_writer.go)
// updates a ConfigMap volume:
//  1. write the payload into a new ..<timestamp> directory;
//  2. point a ..data_tmp symlink at it and rename it over ..data (the one atomic step);
//  3. create the visible key symlinks that are missing (key -> ..data/key) and remove those no longer in the
//     payload (the others are untouched and get no event: they still point at ..data);
//  4. remove the previous timestamped directory.
//
// An identical payload is written again as a new directory, which real kubelets skip but a rewrite of the same
// content (e.g. a re-created ConfigMap) does not.
func WriteConfigMap(t testing.TB, dir string, payload map[string]string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(dir, 0o755))
	dataLink := filepath.Join(dir, "..data")
	old, err := os.Readlink(dataLink)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	must(err)
	for k, v := range payload {
		must(os.WriteFile(filepath.Join(tsDir, k), []byte(v), 0o644))
	}
	tmp := filepath.Join(dir, "..data_tmp")
	must(os.Symlink(filepath.Base(tsDir), tmp))
	must(os.Rename(tmp, dataLink))
	for k := range payload {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
			must(os.Symlink(filepath.Join("..data", k), link))
		}
	}
	entries, err := os.ReadDir(dir)
	must(err)
	for _, e := range entries {
		if _, keep := payload[e.Name()]; !keep && !strings.HasPrefix(e.Name(), ".") {
			must(os.Remove(filepath.Join(dir, e.Name())))
		}
	}
	if old != "" {
		must(os.RemoveAll(filepath.Join(dir, old)))
	}
}
