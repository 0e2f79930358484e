// Package volume reads a ConfigMap volume directory as its readers see it. The kubelet writes such a volume as
// ..<timestamp>/ directories, a ..data symlink to the current one, and one symlink per key (key -> ..data/key),
// and swaps ..data in one rename on every change, so a reader that goes through the key symlinks sees one
// version of the ConfigMap or the next.
//
// May touch: a ConfigMap volume's files, read-only.
package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Read returns the keys of the volume in dir and their contents: the top-level names that do not start with
// '.', read through their symlinks (so the ..data and ..<timestamp> entries are never walked). A missing
// directory reads as an empty volume, and a key symlink left dangling for a moment (the kubelet drops a key
// after swapping ..data) as an absent key; directories are skipped.
func Read(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config directory: %w", err)
	}
	keys := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := readKey(dir, e.Name(), keys); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// ReadKeys is [Read] restricted to the keys named: only they are read, so other files in the directory (a log
// file written next to a template) cost nothing.
func ReadKeys(dir string, names []string) (map[string][]byte, error) {
	keys := map[string][]byte{}
	for _, name := range names {
		if err := readKey(dir, name, keys); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// readKey reads key name of dir into keys, through its symlink; a missing key or a directory is left out.
func readKey(dir, name string, keys map[string][]byte) error {
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat config key: %w", err)
	}
	if st.IsDir() {
		return nil
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read config key: %w", err)
	}
	keys[name] = data
	return nil
}
