package configwatch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// dirHash digests what a reader of a ConfigMap volume sees: the top-level visible names (dot-entries such as
// ..data and ..<timestamp> skipped) and their contents read through the key symlinks, like kube-dns's FileSync
// (sha256 over name\0data\0, names sorted). A missing directory digests like an empty one, as LoadKubeDNS treats
// both as "no ConfigMap". A dangling key symlink, which exists for a moment while the kubelet drops a key after
// swapping ..data, counts as absent; directories are skipped.
func dirHash(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read config directory: %w", err)
	}
	h := sha256.New()
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("stat config key: %w", err)
		}
		if st.IsDir() {
			continue
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read config key: %w", err)
		}
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(data)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
