// Package image builds the nodelocaldns container image without a Docker engine.
//
// The image is an empty base plus one layer: the static binary at /nodelocaldns and /node-cache pointing at it,
// so manifests that name node-cache's old entrypoint keep working. There is no shell, no iptables, no libc: the
// agent programs nftables over netlink and needs nothing else from the filesystem. Entrypoint, user, environment
// and labels are the ones deploy/Dockerfile sets (a test in deploy/ holds the two together).
//
// One image per platform ([Build]); an OCI image index over them ([Index]), so that one reference serves the
// amd64 and the arm64 nodes of a cluster. Both are pure: bytes in, an in-memory value out, identical bytes and
// Spec give an identical digest. Only [WriteArchive] touches the filesystem.
//
// May touch: files under out/.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and how it starts; deploy/Dockerfile says the same.
const (
	// BinaryName is the binary's path in the layer (layer paths carry no leading slash).
	BinaryName = "nodelocaldns"
	// AliasName is node-cache's entrypoint path, a relative symlink to BinaryName.
	AliasName = "node-cache"
	// Entrypoint is the binary's absolute path in the container.
	Entrypoint = "/" + BinaryName
	// User is root: Kubernetes cannot grant ambient capabilities, so a non-root agent would lose NET_ADMIN at
	// exec. The manifests drop every other capability and make the root filesystem read-only.
	User = "0:0"
	// DefaultRef is the reference the manifests name and `make image` tags by default.
	DefaultRef = "ghcr.io/nodelocaldns/nodelocaldns:dev"
	// PathEnv lets `kubectl exec ... -- nodelocaldns -version` and `command: [node-cache]` find the binary.
	PathEnv = "PATH=/"
)

// OCI annotation keys used as image labels (github.com/opencontainers/image-spec annotations.md).
const (
	labelTitle       = "org.opencontainers.image.title"
	labelDescription = "org.opencontainers.image.description"
	labelSource      = "org.opencontainers.image.source"
	labelVersion     = "org.opencontainers.image.version"
)

// Env is the image's environment.
func Env() []string { return []string{PathEnv} }

// Labels are the image's labels for a given version.
func Labels(version string) map[string]string {
	return map[string]string{
		labelTitle:       "nodelocaldns",
		labelDescription: "nftables-native drop-in replacement for the Kubernetes NodeLocal DNSCache agent node-cache",
		labelSource:      "https://github.com/nodelocaldns/nodelocaldns",
		labelVersion:     version,
	}
}

// Spec is what an image is built from.
type Spec struct {
	Binary  []byte    // a statically linked Linux ELF executable
	Arch    string    // GOARCH of Binary, e.g. "amd64"
	Version string    // the version label, e.g. "v0.1.0" or "dev"
	Created time.Time // image and file timestamps; fixed (e.g. the commit time) for reproducible digests
}

// Build returns the image for s. It refuses a binary that is not a static executable for s.Arch, because the
// image has no dynamic loader and no libc to run anything else.
func Build(s Spec) (v1.Image, error) {
	if err := checkStatic(s.Binary, s.Arch); err != nil {
		return nil, fmt.Errorf("check binary: %w", err)
	}
	layerTar, err := layerBytes(s.Binary, s.Created)
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: s.Created},
			CreatedBy: "mkimage: /nodelocaldns (static) and /node-cache -> nodelocaldns",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", s.Arch
	cf.Created = v1.Time{Time: s.Created}
	cf.Config = v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       User,
		Env:        Env(),
		Labels:     Labels(s.Version),
		WorkingDir: "/",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// layerBytes is the uncompressed layer: the binary, then the alias. Owner root, fixed times, no directories
// (the runtime creates the mount points it needs).
func layerBytes(binary []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeReg, Name: BinaryName, Mode: 0o755, Size: int64(len(binary)), ModTime: created, Format: tar.FormatPAX},
		{Typeflag: tar.TypeSymlink, Name: AliasName, Linkname: BinaryName, Mode: 0o777, ModTime: created, Format: tar.FormatPAX},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("write %s: %w", h.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(binary); err != nil {
				return nil, fmt.Errorf("write %s: %w", h.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	return buf.Bytes(), nil
}

// elfMachine maps the GOARCH values we build for to their ELF machine.
func elfMachine(arch string) (elf.Machine, bool) {
	switch arch {
	case "amd64":
		return elf.EM_X86_64, true
	case "arm64":
		return elf.EM_AARCH64, true
	case "arm":
		return elf.EM_ARM, true
	case "ppc64le":
		return elf.EM_PPC64, true
	case "s390x":
		return elf.EM_S390, true
	case "riscv64":
		return elf.EM_RISCV, true
	}
	return elf.EM_NONE, false
}

// checkStatic reports why b is not a static executable for arch: an ELF program interpreter means a dynamic
// loader that the image does not have (build with CGO_ENABLED=0).
func checkStatic(b []byte, arch string) error {
	want, ok := elfMachine(arch)
	if !ok {
		return fmt.Errorf("unsupported architecture %q", arch)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not an ELF file: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("ELF type %s is not an executable", f.Type)
	}
	if f.Machine != want {
		return fmt.Errorf("ELF machine %s does not match architecture %q (%s)", f.Machine, arch, want)
	}
	if interp := Interpreter(f); interp != "" {
		return fmt.Errorf("dynamically linked (interpreter %s): build with CGO_ENABLED=0", interp)
	}
	return nil
}

// Interpreter returns the ELF program interpreter (PT_INTERP) of f, or "" for a static executable.
func Interpreter(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil || len(b) == 0 {
			return "(unreadable)"
		}
		return string(bytes.TrimRight(b, "\x00"))
	}
	return ""
}
