package image

import (
	"cmp"
	"fmt"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Index returns the OCI image index over imgs, one manifest per platform, so that one reference serves every
// node of a mixed cluster: the runtime picks the manifest whose platform is its own. Each descriptor's platform
// is the one its image's config names (what [Build] set from Spec.Arch), never a second list kept beside it.
// Manifests are sorted by platform, so the order of imgs does not change the digest. Two images of one
// platform are refused: a runtime would pick either.
func Index(imgs ...v1.Image) (v1.ImageIndex, error) {
	if len(imgs) == 0 {
		return nil, fmt.Errorf("image index: no images")
	}
	adds := make([]mutate.IndexAddendum, 0, len(imgs))
	for _, img := range imgs {
		p, err := platform(img)
		if err != nil {
			return nil, fmt.Errorf("image index: %w", err)
		}
		mt, err := img.MediaType()
		if err != nil {
			return nil, fmt.Errorf("image index: %s: %w", p, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{MediaType: mt, Platform: p}})
	}
	slices.SortFunc(adds, func(a, b mutate.IndexAddendum) int {
		return cmp.Compare(a.Platform.String(), b.Platform.String())
	})
	for i := 1; i < len(adds); i++ {
		if adds[i].Platform.Equals(*adds[i-1].Platform) {
			return nil, fmt.Errorf("image index: two images for platform %s", adds[i].Platform)
		}
	}
	return mutate.AppendManifests(empty.Index, adds...), nil
}

// platform is the os/architecture(/variant) img's config declares.
func platform(img v1.Image) (*v1.Platform, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	p := cf.Platform()
	if p == nil || p.OS == "" || p.Architecture == "" {
		return nil, fmt.Errorf("image config names no os/architecture")
	}
	return p, nil
}
