// Command ociimage writes an image holding static binaries as a docker-save tarball that `ctr images import`
// loads, without a Docker engine or a registry: the test cluster's pause, kube-dns and client images, and (with
// -rootfs, a directory of extracted Debian packages as the first layer) the images Kubernetes' own e2e suite runs.
// (Our own image comes from `make image`.)
//
//	ociimage -binary out/dnsq -ref localhost/cluster/client:1 -o out/client.tar -- /dnsq sleep
//	ociimage -rootfs ROOT -binary agnhost -binary coredns -ref REF -o OUT.tar -- /agnhost
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
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	var binaries []string
	flag.Func("binary", "static binary to put at /<its base name> (repeatable)", func(s string) error {
		binaries = append(binaries, s)
		return nil
	})
	rootfs := flag.String("rootfs", "", "directory tree to put under the binaries as the image's first layer")
	ref := flag.String("ref", "", "image reference, e.g. localhost/cluster/client:1")
	out := flag.String("o", "", "tarball to write")
	flag.Parse()
	if (len(binaries) == 0 && *rootfs == "") || *ref == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: ociimage [-rootfs DIR] -binary FILE... -ref REF -o OUT.tar -- ENTRYPOINT...")
		os.Exit(2)
	}
	if err := write(binaries, *rootfs, *ref, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func write(binaries []string, rootfs, ref, out string, entrypoint []string) error {
	var layers []v1.Layer
	env := "PATH=/"
	if rootfs != "" {
		l, err := rootfsLayer(rootfs)
		if err != nil {
			return fmt.Errorf("rootfs %q: %w", rootfs, err)
		}
		layers = append(layers, l)
		env = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/"
	}
	if len(binaries) > 0 {
		l, err := binariesLayer(binaries)
		if err != nil {
			return err
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
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
	cf.Config.Env = []string{env}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("ref %q: %w", ref, err)
	}
	return tarball.WriteToFile(out, tag, img)
}

// binariesLayer puts each binary at /<its base name>, beside an empty /etc and /tmp.
func binariesLayer(binaries []string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	// /etc and /tmp exist (empty) so the runtime can mount resolv.conf and hosts files over them.
	for _, d := range []string{"etc/", "tmp/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, binary := range binaries {
		data, err := os.ReadFile(binary)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Base(binary), Mode: 0o755, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return layerOf(buf.Bytes())
}

func layerOf(b []byte) (v1.Layer, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return l, nil
}
