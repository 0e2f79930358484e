// Command ociimage writes a one-layer image holding one static binary as a docker-save tarball that
// `ctr images import` loads, without a Docker engine or a registry: the test cluster's pause, kube-dns and
// client images. (Our own image comes from `make image`.)
//
//	ociimage -binary out/dnsq -ref localhost/cluster/client:1 -o out/client.tar -- /dnsq sleep
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	binary := flag.String("binary", "", "static binary to put at /<its base name>")
	ref := flag.String("ref", "", "image reference, e.g. localhost/cluster/client:1")
	out := flag.String("o", "", "tarball to write")
	flag.Parse()
	if *binary == "" || *ref == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: ociimage -binary FILE -ref REF -o OUT.tar -- ENTRYPOINT...")
		os.Exit(2)
	}
	if err := write(*binary, *ref, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func write(binary, ref, out string, entrypoint []string) error {
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	// /etc and /tmp exist (empty) so the runtime can mount resolv.conf and hosts files over them.
	for _, d := range []string{"etc/", "tmp/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Base(binary), Mode: 0o755, Size: int64(len(data)), ModTime: epoch}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = entrypoint
	cf.Config.Env = []string{"PATH=/"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("ref %q: %w", ref, err)
	}
	return tarball.WriteToFile(out, tag, img)
}
