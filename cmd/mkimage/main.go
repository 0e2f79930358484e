// Command mkimage writes the nodelocaldns container image as a tarball, without a Docker engine or a registry:
// an empty base plus one layer holding the static binary (see internal/image). `make image` runs it:
//
//	mkimage -binary out/nodelocaldns -o out/nodelocaldns-image.tar -ref ghcr.io/nodelocaldns/nodelocaldns:dev
//
// The output loads with `docker load -i`, `podman load -i` or `ctr images import`, and pushes with `crane push`.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/image"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binary := fs.String("binary", "out/nodelocaldns", "statically linked nodelocaldns binary (CGO_ENABLED=0)")
	out := fs.String("o", "out/nodelocaldns-image.tar", "image tarball to write")
	ref := fs.String("ref", image.DefaultRef, "image reference (repository:tag) recorded in the tarball")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH the binary was built for")
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
	when, err := parseEpoch(*created)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 2
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: read binary: %v\n", err)
		return 1
	}
	img, err := image.Build(image.Spec{Binary: bin, Arch: *arch, Version: *version, Created: when})
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %s: %v\n", *binary, err)
		return 1
	}
	if err := image.WriteTarball(*out, *ref, img); err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	digest, err := img.Digest()
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: digest: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s %s\n", *out, *ref, digest)
	return 0
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
