package corefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// This file is the package's only I/O: reading the kube-dns ConfigMap volume. Everything it reads goes through
// the pure parseKubeDNS.

// LoadKubeDNS reads the kube-dns ConfigMap volume in dir. Keys are read through their symlinks (key -> ..data/key),
// so only the top level is looked at and the ..data / ..<timestamp> entries are never walked. A missing directory,
// an empty one, or a missing key is the zero configuration, not an error: the manifest mounts the ConfigMap with
// `optional: true`. Errors name the file, the key and the offending value.
func LoadKubeDNS(dir string) (KubeDNS, error) {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return KubeDNS{}, nil
	}
	if err != nil {
		return KubeDNS{}, fmt.Errorf("kube-dns config %s: %w", dir, err)
	}
	if !st.IsDir() {
		return KubeDNS{}, fmt.Errorf("kube-dns config %s: not a directory", dir)
	}
	files := map[string][]byte{}
	for _, key := range []string{keyStubDomains, keyUpstreamNameservers} {
		data, err := os.ReadFile(filepath.Join(dir, key))
		if errors.Is(err, fs.ErrNotExist) {
			continue // absent key, or a key symlink left dangling for a moment while the kubelet removes it
		}
		if err != nil {
			return KubeDNS{}, fmt.Errorf("read kube-dns config: %w", err)
		}
		files[key] = data
	}
	return parseKubeDNS(files, func(key string) string { return filepath.Join(dir, key) })
}
