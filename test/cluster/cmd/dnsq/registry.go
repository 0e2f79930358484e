package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// registry serves one image archive (`make image`'s OCI layout in a tar) read-only over the registry API
// (distribution spec: /v2/, manifests by tag or digest, blobs), so that a node's containerd really pulls the image
// instead of finding it imported. -delay holds the first resolution of a tag that long: the stand-in for a pull
// from a remote registry, which is what the cluster suite's first-start case measures around.
//
//	dnsq registry -addr 127.0.0.1:5000 -image nodelocaldns.tar -delay 10s
//
// Every request is logged with its time on stderr.
func registry(args []string) int {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:5000", "listen address")
	image := fs.String("image", "", "the image archive: an OCI image layout in a tar")
	delay := fs.Duration("delay", 0, "hold the first manifest request by tag this long (the pull's stand-in)")
	if err := fs.Parse(args); err != nil || *image == "" {
		fmt.Fprintln(os.Stderr, "usage: dnsq registry -addr ADDR -image ARCHIVE [-delay D]")
		return 2
	}
	blobs, index, err := readLayout(*image)
	if err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		return 1
	}
	lg := log.New(os.Stderr, "registry: ", log.LstdFlags|log.Lmicroseconds)
	r := &imageRegistry{blobs: blobs, index: index, delay: *delay, log: lg}
	lg.Printf("serving %s (index %s, %d blobs) on %s, first tag resolution held %v", *image, index, len(blobs), *addr, *delay)
	if err := http.ListenAndServe(*addr, r); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		return 1
	}
	return 0
}

type imageRegistry struct {
	blobs map[string][]byte // by digest ("sha256:...")
	index string            // the digest index.json names: what every tag resolves to
	delay time.Duration
	log   *log.Logger
	held  sync.Once
}

func (r *imageRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.log.Printf("%s %s", req.Method, req.URL.Path)
	p := req.URL.Path
	if p == "/v2/" || p == "/v2" {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		w.Write([]byte("{}"))
		return
	}
	var digest string
	switch {
	case strings.Contains(p, "/manifests/"):
		ref := p[strings.LastIndex(p, "/manifests/")+len("/manifests/"):]
		digest = ref
		if !strings.HasPrefix(ref, "sha256:") {
			r.held.Do(func() {
				r.log.Printf("holding tag %q for %v (the pull's stand-in)", ref, r.delay)
				time.Sleep(r.delay)
			})
			digest = r.index
		}
	case strings.Contains(p, "/blobs/"):
		digest = p[strings.LastIndex(p, "/blobs/")+len("/blobs/"):]
	default:
		http.NotFound(w, req)
		return
	}
	b, ok := r.blobs[digest]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"%s"}]}`, digest)
		return
	}
	ct := "application/octet-stream"
	if strings.Contains(p, "/manifests/") {
		var m struct {
			MediaType string `json:"mediaType"`
		}
		if json.Unmarshal(b, &m) == nil && m.MediaType != "" {
			ct = m.MediaType
		}
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Docker-Content-Digest", digest)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if req.Method == http.MethodHead {
		return
	}
	w.Write(b)
}

// readLayout reads the archive's blobs and the digest its index.json names.
func readLayout(path string) (map[string][]byte, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	blobs := map[string][]byte{}
	var indexJSON []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, "", err
		}
		name := strings.TrimPrefix(h.Name, "./")
		if d, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			blobs["sha256:"+d] = b
		} else if name == "index.json" {
			indexJSON = b
		}
	}
	var idx struct {
		Manifests []struct {
			Digest string `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(indexJSON, &idx); err != nil || len(idx.Manifests) != 1 {
		return nil, "", fmt.Errorf("%s: index.json names %d images, want one (%v)", path, len(idx.Manifests), err)
	}
	return blobs, idx.Manifests[0].Digest, nil
}
