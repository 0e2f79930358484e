package configwatch

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/nodelocaldns/nodelocaldns/internal/volume"
)

// dirHash digests what a reader of a ConfigMap volume sees (internal/volume), like kube-dns's FileSync: sha256
// over name\0data\0 for each key, names sorted. A missing directory digests like an empty one, as LoadKubeDNS
// treats both as "no ConfigMap". only, when not nil, restricts the digest to those keys, and only they are read.
func dirHash(dir string, only []string) (string, error) {
	keys, err := volume.Read(dir)
	if only != nil {
		keys, err = volume.ReadKeys(dir, only)
	}
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(keys))
	for name := range keys {
		names = append(names, name)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range names {
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(keys[name])
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
