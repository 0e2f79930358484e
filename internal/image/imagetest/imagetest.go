// Package imagetest reads back the images and archives internal/image builds, for the tests of that package and
// of deploy/: the one walk over an image's layer, over an index's platforms and over an archive's layout.
//
// May touch: the image files it is given, read-only.
package imagetest

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Layer returns the entries of img's only layer, in order, and the content of its regular files by name; it
// fails t unless img has exactly one layer.
func Layer(t testing.TB, img v1.Image) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hdrs []*tar.Header
	files := map[string][]byte{}
	eachEntry(t, rc, func(h *tar.Header, data []byte) {
		hdrs = append(hdrs, h)
		if h.Typeflag == tar.TypeReg {
			files[h.Name] = data
		}
	})
	return hdrs, files
}

// eachEntry calls fn with each entry of the tar stream r and, for a regular file, its content.
func eachEntry(t testing.TB, r io.Reader, fn func(h *tar.Header, data []byte)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var data []byte
		if h.Typeflag == tar.TypeReg {
			if data, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		fn(h, data)
	}
}

// Images returns the platforms of idx's manifests as "os/arch" in index order, and each one's image; it fails t
// unless every manifest is an image with a platform of its own.
func Images(t testing.TB, idx v1.ImageIndex) ([]string, map[string]v1.Image) {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	imgs := map[string]v1.Image{}
	for _, d := range im.Manifests {
		if d.Platform == nil || !d.MediaType.IsImage() {
			t.Fatalf("index entry %s (%s) is not an image with a platform", d.Digest, d.MediaType)
		}
		p := d.Platform.String()
		if _, dup := imgs[p]; dup {
			t.Fatalf("index has two images for %s", p)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		platforms = append(platforms, p)
		imgs[p] = img
	}
	return platforms, imgs
}

// ELFMachine returns the machine of the ELF file b, failing t if b is not one.
func ELFMachine(t testing.TB, b []byte) elf.Machine {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not an ELF file: %v", err)
	}
	defer f.Close()
	return f.Machine
}

// ReadArchive unpacks the archive at path (internal/image.WriteArchive) into a temporary directory and returns
// it read as an OCI image layout: its index.json, and the one image index that index.json names.
func ReadArchive(t testing.TB, path string) (*v1.IndexManifest, v1.ImageIndex) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	eachEntry(t, f, func(h *tar.Header, data []byte) {
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves the archive", h.Name)
		}
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = os.WriteFile(p, data, 0o644)
		default:
			t.Fatalf("archive entry %q has type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("read %s as an OCI image layout: %v", path, err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("index.json = %+v, want one entry, an image index", im.Manifests)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return im, idx
}
