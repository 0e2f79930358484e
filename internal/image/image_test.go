package image

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nodelocaldns/nodelocaldns/internal/image/imagetest"
)

// created is the timestamp of every test image: any fixed time will do.
var created = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// buildHello compiles testdata/hello as a static Linux executable for goarch and returns its bytes.
func buildHello(t *testing.T, goarch string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./testdata/hello")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/hello: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustBuild(t *testing.T, s Spec) v1.Image {
	t.Helper()
	img, err := Build(s)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return img
}

func TestBuildConfig(t *testing.T) {
	img := mustBuild(t, Spec{Binary: buildHello(t, runtime.GOARCH), Arch: runtime.GOARCH, Version: "v1.2.3", Created: created})
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Time.Equal(created) {
		t.Errorf("created = %v, want %v", cf.Created.Time, created)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "/nodelocaldns" || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/nodelocaldns] and no cmd", c.Entrypoint, c.Cmd)
	}
	if c.User != "0:0" {
		t.Errorf("user = %q, want 0:0", c.User)
	}
	if strings.Join(c.Env, " ") != "PATH=/" {
		t.Errorf("env = %q, want [PATH=/]", c.Env)
	}
	if got := c.Labels["org.opencontainers.image.version"]; got != "v1.2.3" {
		t.Errorf("version label = %q, want v1.2.3", got)
	}
	if got := c.Labels["org.opencontainers.image.title"]; got != "nodelocaldns" {
		t.Errorf("title label = %q, want nodelocaldns", got)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type = %s, want %s", mt, types.OCIManifestSchema1)
	}
}

func TestBuildLayer(t *testing.T) {
	bin := buildHello(t, runtime.GOARCH)
	hdrs, files := imagetest.Layer(t, mustBuild(t, Spec{Binary: bin, Arch: runtime.GOARCH, Version: "dev", Created: created}))
	if len(hdrs) != 2 {
		t.Fatalf("layer has %d entries, want 2 (binary and alias)", len(hdrs))
	}
	b, a := hdrs[0], hdrs[1]
	if b.Name != "nodelocaldns" || b.Typeflag != tar.TypeReg || b.Mode != 0o755 || b.Uid != 0 || b.Gid != 0 {
		t.Errorf("binary entry = %q type %c mode %o uid %d gid %d, want nodelocaldns regular 0755 root", b.Name, b.Typeflag, b.Mode, b.Uid, b.Gid)
	}
	if !bytes.Equal(files["nodelocaldns"], bin) {
		t.Errorf("binary in layer differs from the input (%d vs %d bytes)", len(files["nodelocaldns"]), len(bin))
	}
	if a.Name != "node-cache" || a.Typeflag != tar.TypeSymlink || a.Linkname != "nodelocaldns" {
		t.Errorf("alias entry = %q type %c -> %q, want node-cache symlink -> nodelocaldns", a.Name, a.Typeflag, a.Linkname)
	}
	for _, h := range hdrs {
		if !h.ModTime.Equal(created) {
			t.Errorf("%s mtime = %v, want %v", h.Name, h.ModTime, created)
		}
	}
}

func TestBuildReproducible(t *testing.T) {
	bin := buildHello(t, runtime.GOARCH)
	digest := func(s Spec) v1.Hash {
		d, err := mustBuild(t, s).Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	s := Spec{Binary: bin, Arch: runtime.GOARCH, Version: "dev", Created: created}
	first, second := digest(s), digest(s)
	if first != second {
		t.Errorf("same input, different digests: %s, %s", first, second)
	}
	later := s
	later.Created = created.Add(time.Second)
	if d := digest(later); d == first {
		t.Errorf("different timestamp, same digest %s", d)
	}
}

func TestBuildRefuses(t *testing.T) {
	hello := buildHello(t, runtime.GOARCH)
	otherArch := "arm64"
	if runtime.GOARCH == "arm64" {
		otherArch = "amd64"
	}
	dynamic, err := os.ReadFile("/bin/true") // Debian's coreutils: dynamically linked against libc
	if err != nil {
		t.Fatal(err)
	}
	// The machine's own architecture, which is not the test's under user-mode emulation (make test-arm64).
	dynamicArch := archOf(t, dynamic)
	for _, tc := range []struct {
		name, arch, want string
		bin              []byte
	}{
		{"dynamic", dynamicArch, "dynamically linked (interpreter /lib", dynamic},
		{"wrong arch", otherArch, "does not match architecture", hello},
		{"unknown arch", "mips", `unsupported architecture "mips"`, hello},
		{"not elf", runtime.GOARCH, "not an ELF file", []byte("#!/bin/sh\necho hi\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(Spec{Binary: tc.bin, Arch: tc.arch, Created: created})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// archOf is the GOARCH whose ELF machine b's is.
func archOf(t *testing.T, b []byte) string {
	t.Helper()
	machine := imagetest.ELFMachine(t, b)
	for _, arch := range []string{"amd64", "arm64", "arm", "ppc64le", "s390x", "riscv64"} {
		if m, _ := elfMachine(arch); m == machine {
			return arch
		}
	}
	t.Fatalf("no GOARCH for ELF machine %s", machine)
	return ""
}
