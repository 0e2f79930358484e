package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/nodelocaldns/nodelocaldns/internal/image/imagetest"
)

// TestWriteArchiveRoundTrip writes the archive of a two-platform index and reads it back as its users do: as an
// OCI image layout (skopeo, podman, ctr, regctl), and as a `docker save` tarball (the classic docker store),
// whose one image it unpacks and runs through its node-cache alias.
func TestWriteArchiveRoundTrip(t *testing.T) {
	idx := buildIndex(t, Spec{Version: "dev", Created: created}, "amd64", "arm64")
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	_, imgs := imagetest.Images(t, idx)
	dir := t.TempDir()
	path := filepath.Join(dir, "image.tar")
	const ref = "example.test/nodelocaldns:t1"
	if err := WriteArchive(path, ref, idx, runtime.GOARCH); err != nil {
		t.Fatal(err)
	}

	top, back := imagetest.ReadArchive(t, path)
	wantNames := map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": "t1"}
	if got := top.Manifests[0].Annotations; !maps.Equal(got, wantNames) {
		t.Errorf("index.json annotations = %v, want %v", got, wantNames)
	}
	if got, _ := back.Digest(); got != want || top.Manifests[0].Digest != want {
		t.Errorf("index read back = %s (index.json says %s), want %s", got, top.Manifests[0].Digest, want)
	}
	// Every blob is there and hashes to its digest: manifests, configs, layers.
	if err := validate.Index(back); err != nil {
		t.Errorf("index read back: %v", err)
	}
	if platforms, _ := imagetest.Images(t, back); !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms read back = %q", platforms)
	}

	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{ref}) {
		t.Fatalf("manifest.json = %+v, want one image tagged %s", m, ref)
	}
	loaded, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatalf("read back as docker save: %v", err)
	}
	// The docker-save format keeps the config and layer blobs but not the manifest (the reader rebuilds one), so
	// compare what it keeps with the index's image for this machine.
	host := imgs["linux/"+runtime.GOARCH]
	sameBlobs(t, loaded, host)
	root := filepath.Join(dir, "rootfs")
	unpack(t, loaded, root)
	out, err := exec.Command(filepath.Join(root, "node-cache"), "-version").CombinedOutput()
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		// Under user-mode emulation (make test-arm64) without binfmt_misc the kernel cannot run the image's
		// binary; its ELF machine was checked above.
		t.Logf("not run: %v", err)
	case err != nil || string(out) != "hello [-version]\n":
		t.Errorf("running /node-cache -version: %v, output %q", err, out)
	}

	again := filepath.Join(dir, "again.tar")
	if err := WriteArchive(again, ref, idx, runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	if a, b := mustReadFile(t, path), mustReadFile(t, again); !bytes.Equal(a, b) {
		t.Errorf("same index written twice, different archives (%d and %d bytes)", len(a), len(b))
	}
}

func TestWriteArchiveRefuses(t *testing.T) {
	idx := buildIndex(t, Spec{Created: created}, "amd64")
	path := filepath.Join(t.TempDir(), "image.tar")
	for _, tc := range []struct{ name, ref, arch, want string }{
		{"bad reference", "Not A Reference", "amd64", `image reference "Not A Reference"`},
		{"no registry", "nodelocaldns:dev", "amd64", `image reference "nodelocaldns:dev"`},
		{"load arch not in index", "example.test/nodelocaldns:t", "arm64", "no linux/arm64 image in the index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteArchive(path, tc.ref, idx, tc.arch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WriteArchive error = %v, want it to contain %q", err, tc.want)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("refused archive left %s behind (%v)", path, err)
			}
		})
	}
}

// sameBlobs: got has want's config and layers.
func sameBlobs(t *testing.T, got, want v1.Image) {
	t.Helper()
	wantCfg, _ := want.ConfigName()
	if cfg, _ := got.ConfigName(); cfg != wantCfg {
		t.Errorf("config digest = %s, want %s", cfg, wantCfg)
	}
	wantLayers, _ := want.Layers()
	gotLayers, _ := got.Layers()
	if len(gotLayers) != len(wantLayers) {
		t.Fatalf("%d layers, want %d", len(gotLayers), len(wantLayers))
	}
	for i := range wantLayers {
		w, _ := wantLayers[i].Digest()
		if g, _ := gotLayers[i].Digest(); g != w {
			t.Errorf("layer %d digest = %s, want %s", i, g, w)
		}
	}
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unpack writes the image's single layer under root.
func unpack(t *testing.T, img v1.Image, root string) {
	t.Helper()
	hdrs, files := imagetest.Layer(t, img)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range hdrs {
		p := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeReg:
			if err := os.WriteFile(p, files[h.Name], os.FileMode(h.Mode)); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected entry %q type %c", h.Name, h.Typeflag)
		}
	}
}
