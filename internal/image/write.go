package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the index.json entry that name the image (github.com/opencontainers/image-spec
// image-layout.md and annotations.md; containerd's images.AnnotationImageName). `ctr images import` takes the
// full reference from the first, skopeo matches `oci-archive:FILE:TAG` against the second; `docker save` and
// `ctr images export` write both.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// archiveTime is every archive entry's modification time: the archive's bytes depend on the images alone.
var archiveTime = time.Unix(0, 0).UTC()

// WriteArchive writes idx, named ref, to path as one tar that the common loaders read:
//
//   - an OCI image layout (oci-layout, index.json, blobs/sha256/...) whose index.json names idx: skopeo's
//     oci-archive transport and `ctr images import` read it with every platform, and so does `crane push` once
//     it is unpacked into a directory;
//   - a `docker save` manifest.json for idx's linux/<loadArch> image, pointing into the same blobs: the classic
//     docker image store knows no index and loads that one image (the format `docker save` itself writes since
//     Docker 25).
//
// The file appears whole or not at all (temp file and rename), so an interrupted build never leaves a truncated
// archive behind. The same idx, ref and loadArch give the same bytes.
func WriteArchive(path, ref string, idx v1.ImageIndex, loadArch string) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	files, err := archiveFiles(tag, idx, loadArch)
	if err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	return writeAtomic(path, func(w io.Writer) error { return writeTar(w, files) })
}

// archiveFile is one regular file of the archive.
type archiveFile struct {
	name string
	data []byte
}

// archiveFiles lists the archive's files: the layout's two, manifest.json, then every blob once, by digest.
func archiveFiles(tag name.Tag, idx v1.ImageIndex, loadArch string) ([]archiveFile, error) {
	blobs := map[v1.Hash][]byte{}
	idxRaw, err := idx.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("index manifest: %w", err)
	}
	idxDesc, err := descriptorOf(idx, idxRaw)
	if err != nil {
		return nil, err
	}
	blobs[idxDesc.Digest] = idxRaw
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("index manifest: %w", err)
	}
	var load *tarball.Descriptor
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", d.Digest, err)
		}
		legacy, err := addImageBlobs(blobs, img)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", d.Platform, err)
		}
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == loadArch {
			legacy.RepoTags = []string{tag.String()}
			load = &legacy
		}
	}
	if load == nil {
		return nil, fmt.Errorf("no linux/%s image in the index for docker load's manifest.json", loadArch)
	}

	idxDesc.Annotations = map[string]string{annotationImageName: tag.String(), annotationRefName: tag.TagStr()}
	layout := v1.IndexManifest{SchemaVersion: 2, MediaType: im.MediaType, Manifests: []v1.Descriptor{idxDesc}}
	files := make([]archiveFile, 0, 3+len(blobs))
	for _, f := range []struct {
		name string
		v    any
	}{
		{"oci-layout", map[string]string{"imageLayoutVersion": "1.0.0"}},
		{"index.json", layout},
		{"manifest.json", tarball.Manifest{*load}},
	} {
		b, err := json.Marshal(f.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		files = append(files, archiveFile{f.name, b})
	}
	digests := make([]v1.Hash, 0, len(blobs))
	for h := range blobs {
		digests = append(digests, h)
	}
	slices.SortFunc(digests, func(a, b v1.Hash) int { return strings.Compare(a.String(), b.String()) })
	for _, h := range digests {
		files = append(files, archiveFile{blobPath(h), blobs[h]})
	}
	return files, nil
}

// addImageBlobs adds img's manifest, config and layers to blobs and returns its manifest.json entry (no tags).
func addImageBlobs(blobs map[v1.Hash][]byte, img v1.Image) (tarball.Descriptor, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return tarball.Descriptor{}, fmt.Errorf("manifest: %w", err)
	}
	d, err := descriptorOf(img, raw)
	if err != nil {
		return tarball.Descriptor{}, err
	}
	blobs[d.Digest] = raw
	cfg, err := img.RawConfigFile()
	if err != nil {
		return tarball.Descriptor{}, fmt.Errorf("config: %w", err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return tarball.Descriptor{}, fmt.Errorf("config: %w", err)
	}
	blobs[cfgName] = cfg
	legacy := tarball.Descriptor{Config: blobPath(cfgName)}
	layers, err := img.Layers()
	if err != nil {
		return tarball.Descriptor{}, fmt.Errorf("layers: %w", err)
	}
	for _, l := range layers {
		h, err := l.Digest()
		if err != nil {
			return tarball.Descriptor{}, fmt.Errorf("layer: %w", err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return tarball.Descriptor{}, fmt.Errorf("layer %s: %w", h, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return tarball.Descriptor{}, fmt.Errorf("layer %s: %w", h, err)
		}
		blobs[h] = b
		legacy.Layers = append(legacy.Layers, blobPath(h))
	}
	return legacy, nil
}

// descriptorOf is the descriptor of the manifest m, whose bytes are raw.
func descriptorOf(m interface {
	MediaType() (types.MediaType, error)
}, raw []byte) (v1.Descriptor, error) {
	mt, err := m.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("media type: %w", err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("digest: %w", err)
	}
	return v1.Descriptor{MediaType: mt, Size: int64(len(raw)), Digest: h}, nil
}

// blobPath is where the OCI image layout keeps the blob h.
func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// writeTar writes files after the directories that hold them. Owner root, fixed times, sorted as given.
func writeTar(w io.Writer, files []archiveFile) error {
	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: archiveTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write %s: %w", d, err)
		}
	}
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: archiveTime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return tw.Close()
}

// writeAtomic writes path through write into a temp file beside it and renames it into place, so that path
// appears whole or not at all.
func writeAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	bw := bufio.NewWriter(tmp)
	if err := write(bw); err != nil {
		tmp.Close()
		return fmt.Errorf("write image %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
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
