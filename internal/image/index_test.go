package image

import (
	"debug/elf"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nodelocaldns/nodelocaldns/internal/image/imagetest"
)

// The platforms `make image` puts in the index, and the ELF machine each one's binary must be.
var indexPlatforms = []struct {
	arch    string
	machine elf.Machine
}{
	{"amd64", elf.EM_X86_64},
	{"arm64", elf.EM_AARCH64},
}

// buildIndex builds one image per indexPlatforms entry from testdata/hello, in the order given by archs.
func buildIndex(t *testing.T, s Spec, archs ...string) v1.ImageIndex {
	t.Helper()
	var imgs []v1.Image
	for _, arch := range archs {
		s.Arch, s.Binary = arch, buildHello(t, arch)
		imgs = append(imgs, mustBuild(t, s))
	}
	idx, err := Index(imgs...)
	if err != nil {
		t.Fatalf("Index: %v", err)
	}
	return idx
}

// TestIndexPlatforms: exactly one manifest per platform, each naming the platform its config and its binary are.
func TestIndexPlatforms(t *testing.T) {
	idx := buildIndex(t, Spec{Version: "dev", Created: created}, "arm64", "amd64")
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type = %s, want %s", mt, types.OCIImageIndex)
	}
	platforms, imgs := imagetest.Images(t, idx)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Fatalf("index platforms = %q, want %q", platforms, want)
	}
	for _, p := range indexPlatforms {
		img := imgs["linux/"+p.arch]
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != p.arch {
			t.Errorf("linux/%s: config platform %s/%s", p.arch, cf.OS, cf.Architecture)
		}
		_, files := imagetest.Layer(t, img)
		if m := imagetest.ELFMachine(t, files[BinaryName]); m != p.machine {
			t.Errorf("linux/%s: /%s is ELF machine %s, want %s", p.arch, BinaryName, m, p.machine)
		}
	}
}

// TestIndexReproducible: the same binaries and Spec give the same index digest in either order; another
// timestamp gives another.
func TestIndexReproducible(t *testing.T) {
	s := Spec{Version: "dev", Created: created}
	digest := func(idx v1.ImageIndex) v1.Hash {
		t.Helper()
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest(buildIndex(t, s, "amd64", "arm64"))
	if again := digest(buildIndex(t, s, "arm64", "amd64")); again != first {
		t.Errorf("same images, different index digests: %s, %s", first, again)
	}
	later := s
	later.Created = created.Add(time.Second)
	if d := digest(buildIndex(t, later, "amd64", "arm64")); d == first {
		t.Errorf("different timestamp, same index digest %s", d)
	}
}

func TestIndexRefuses(t *testing.T) {
	amd := mustBuild(t, Spec{Binary: buildHello(t, "amd64"), Arch: "amd64", Created: created})
	if _, err := Index(amd, amd); err == nil || !strings.Contains(err.Error(), "two images for platform linux/amd64") {
		t.Errorf("Index of one platform twice: error = %v, want it to name the platform", err)
	}
	if _, err := Index(); err == nil || !strings.Contains(err.Error(), "no images") {
		t.Errorf("Index(): error = %v, want no images", err)
	}
}
