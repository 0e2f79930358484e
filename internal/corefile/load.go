package corefile

import (
	"fmt"
	"path/filepath"

	"github.com/nodelocaldns/nodelocaldns/internal/volume"
)

// LoadKubeDNS reads the kube-dns ConfigMap volume in dir (internal/volume: through the key symlinks, the
// ..data / ..<timestamp> entries never walked) and validates it. It is the package's only I/O. A missing
// directory, an empty one, or a missing key is the zero configuration, not an error: the manifest mounts the
// ConfigMap with `optional: true`. Errors name the file, the key and the offending value.
func LoadKubeDNS(dir string) (KubeDNS, error) {
	keys, err := volume.Read(dir)
	if err != nil {
		return KubeDNS{}, fmt.Errorf("kube-dns config %s: %w", dir, err)
	}
	return parseKubeDNS(keys, func(key string) string { return filepath.Join(dir, key) })
}
