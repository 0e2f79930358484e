package image

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// WriteTarball writes img, tagged ref, to path in the `docker save` tarball format, which `docker load`,
// `podman load`, `ctr images import` and `crane push` read. The file appears whole or not at all (temp file and
// rename), so an interrupted build never leaves a truncated image behind.
func WriteTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tarball.Write(tag, img, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write image %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	return nil
}
