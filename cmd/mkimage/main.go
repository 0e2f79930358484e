// Command mkimage writes the nodelocaldns container image as one archive, without a Docker engine or a
// registry: an OCI image index with one image per platform, each an empty base plus one layer holding that
// platform's static binary (see internal/image). `make image` runs it:
//
//	mkimage -binary amd64=out/linux-amd64/nodelocaldns -binary arm64=out/linux-arm64/nodelocaldns \
//		-o out/nodelocaldns-image.tar -ref ghcr.io/nodelocaldns/nodelocaldns:dev
//
// The archive is an OCI image layout in a tar that also carries a `docker save` manifest.json for the
// -load-arch image: `ctr images import` reads every platform, `docker load` (classic store) the -load-arch
// image; `skopeo copy --all oci-archive:...`, or `crane push` of the unpacked directory, pushes the index (README
// "Build and push the image"). It prints the archive, the reference and the index digest, then each platform's
// manifest digest.
//
// May touch: files under out/.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/nodelocaldns/nodelocaldns/internal/image"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var binaries []binary
	fs.Func("binary", "GOARCH=PATH: a statically linked nodelocaldns binary (CGO_ENABLED=0) for linux/GOARCH; once per platform", func(s string) error {
		b, err := parseBinary(s, binaries)
		if err != nil {
			return err
		}
		binaries = append(binaries, b)
		return nil
	})
	out := fs.String("o", "out/nodelocaldns-image.tar", "image archive to write")
	ref := fs.String("ref", image.DefaultRef, "image reference (registry/repository:tag) recorded in the archive")
	loadArch := fs.String("load-arch", runtime.GOARCH, "GOARCH of the one image that docker load takes from the archive (its classic store knows no index)")
	version := fs.String("version", "dev", "value of the org.opencontainers.image.version label")
	// SOURCE_DATE_EPOCH is the reproducible-builds convention (https://reproducible-builds.org/specs/source-date-epoch/).
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "image timestamp in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mkimage: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if len(binaries) == 0 {
		fmt.Fprintln(stderr, "mkimage: no -binary: give one GOARCH=PATH per platform")
		return 2
	}
	when, err := parseEpoch(*created)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 2
	}
	imgs := make([]v1.Image, 0, len(binaries))
	for _, b := range binaries {
		bin, err := os.ReadFile(b.path)
		if err != nil {
			fmt.Fprintf(stderr, "mkimage: read binary: %v\n", err)
			return 1
		}
		img, err := image.Build(image.Spec{Binary: bin, Arch: b.arch, Version: *version, Created: when})
		if err != nil {
			fmt.Fprintf(stderr, "mkimage: %s: %v\n", b.path, err)
			return 1
		}
		imgs = append(imgs, img)
	}
	idx, err := image.Index(imgs...)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	if err := image.WriteArchive(*out, *ref, idx, *loadArch); err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	if err := report(stdout, *out, *ref, idx); err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	return 0
}

// binary is one -binary flag: the GOARCH a binary was built for and its path.
type binary struct{ arch, path string }

// parseBinary parses GOARCH=PATH, refusing an architecture already given.
func parseBinary(s string, seen []binary) (binary, error) {
	arch, path, ok := strings.Cut(s, "=")
	if !ok || arch == "" || path == "" {
		return binary{}, fmt.Errorf("want GOARCH=PATH, e.g. arm64=out/linux-arm64/nodelocaldns")
	}
	for _, b := range seen {
		if b.arch == arch {
			return binary{}, fmt.Errorf("%s given twice (%s and %s)", arch, b.path, path)
		}
	}
	return binary{arch, path}, nil
}

// report prints the archive, the reference and the index digest, then one line per platform with its digest.
func report(w io.Writer, out, ref string, idx v1.ImageIndex) error {
	digest, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("index manifest: %w", err)
	}
	fmt.Fprintf(w, "%s %s %s\n", out, ref, digest)
	for _, d := range im.Manifests {
		fmt.Fprintf(w, "  %s %s\n", d.Platform, d.Digest)
	}
	return nil
}

// parseEpoch turns Unix seconds into a time; empty means the epoch itself, so builds without a date still agree.
func parseEpoch(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("invalid value %q for flag -created: want Unix seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}
