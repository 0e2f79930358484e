package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nodelocaldns/nodelocaldns/internal/image"
	"github.com/nodelocaldns/nodelocaldns/internal/image/imagetest"
)

// What TestMakeImage asks `make image` for.
const (
	testRef     = "example.test/nodelocaldns:deploy-test"
	testVersion = "v0.0.0-deploy-test"
	testEpoch   = 1700000000
)

// TestMakeImage runs `make image` as a user would (deploy/deploy.mk alone, from the repository root) and checks
// the archive: an index of exactly linux/amd64 and linux/arm64; each image with the Dockerfile's config for its
// platform and one layer with exactly that platform's static binary and its /node-cache alias; docker load's
// manifest.json naming this machine's image, whose binary runs and accepts every manifest's arguments; and a
// second build in another directory writing the same archive, byte for byte (same commit, same digest).
func TestMakeImage(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds the agent binary for two architectures")
	}
	out := t.TempDir()
	makeImage(t, out)
	tarPath := filepath.Join(out, "nodelocaldns-image.tar")

	top, idx := imagetest.ReadArchive(t, tarPath)
	if got := top.Manifests[0].Annotations["io.containerd.image.name"]; got != testRef {
		t.Errorf("index.json names the image %q, want %s", got, testRef)
	}
	platforms, imgs := imagetest.Images(t, idx)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Fatalf("index platforms = %q, want %q", platforms, want)
	}
	for _, p := range []struct {
		arch    string
		machine elf.Machine
	}{{"amd64", elf.EM_X86_64}, {"arm64", elf.EM_AARCH64}} {
		img := imgs["linux/"+p.arch]
		checkImageConfig(t, img, p.arch)
		root := filepath.Join(out, "rootfs-"+p.arch)
		unpackOnly(t, img, root)
		bin := filepath.Join(root, image.BinaryName)
		checkStaticBinary(t, bin, p.machine)
		if built := filepath.Join(out, "linux-"+p.arch, "nodelocaldns"); !bytes.Equal(mustRead(t, bin), mustRead(t, built)) {
			t.Errorf("linux/%s: the image's binary differs from %s", p.arch, built)
		}
	}

	// The classic docker store knows no index: manifest.json gives it this machine's image, whose binary is
	// also the one make image leaves at $(IMAGE_OUT)/nodelocaldns (test/cluster runs it on the host).
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(tarPath) })
	if err != nil {
		t.Fatalf("read %s: %v", tarPath, err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{testRef}) {
		t.Fatalf("manifest.json = %+v, want one image tagged %s", m, testRef)
	}
	loaded, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := imgs["linux/"+runtime.GOARCH]
	if got, want := configName(t, loaded), configName(t, host); got != want {
		t.Errorf("manifest.json's image has config %s, want linux/%s's %s", got, runtime.GOARCH, want)
	}
	root := filepath.Join(out, "rootfs-"+runtime.GOARCH)
	if !bytes.Equal(mustRead(t, filepath.Join(out, "nodelocaldns")), mustRead(t, filepath.Join(root, image.BinaryName))) {
		t.Errorf("%s/nodelocaldns is not the linux/%s image's binary", out, runtime.GOARCH)
	}

	// The binary runs, under both names, and reports the version it was built with.
	for _, name := range []string{"nodelocaldns", "node-cache"} {
		b, err := exec.Command(filepath.Join(root, name), "-version").CombinedOutput()
		if err != nil || !strings.Contains(string(b), testVersion) {
			t.Errorf("/%s -version: %v, output %q, want it to name %s", name, err, b, testVersion)
		}
	}
	// The built binary's own flag parser accepts every manifest's arguments and the standard ones:
	// -print-rules parses and validates them and prints the ruleset without changing the kernel.
	argSets := map[string][]string{}
	for _, v := range variants {
		m, err := decodeStrict(sed(render(t, v.dir), v.sed))
		if err != nil {
			t.Fatal(err)
		}
		argSets[v.dir] = m.daemonSets["kube-system/node-local-dns"].Spec.Template.Spec.Containers[0].Args
	}
	for _, s := range readStandardArgs(t) {
		argSets["standard: "+s.Name] = s.Args
	}
	for name, args := range argSets {
		cmd := exec.Command(filepath.Join(root, "node-cache"), append([]string{"-print-rules"}, args...)...)
		if os.Geteuid() == 0 { // its preflight asks the kernel (changing nothing): never in the machine's own namespace
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		}
		b, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(b), "table inet nodelocaldns") {
			t.Errorf("%s: node-cache -print-rules %q: %v\n%s", name, args, err, b)
		}
	}

	again := t.TempDir()
	makeImage(t, again)
	if a, b := mustRead(t, tarPath), mustRead(t, filepath.Join(again, "nodelocaldns-image.tar")); !bytes.Equal(a, b) {
		_, idx2 := imagetest.ReadArchive(t, filepath.Join(again, "nodelocaldns-image.tar"))
		d1, _ := idx.Digest()
		d2, _ := idx2.Digest()
		t.Errorf("two builds of one commit differ: index %s and %s (%d and %d bytes)", d1, d2, len(a), len(b))
	}
}

// makeImage runs `make image` into out with the test's reference, version and time.
func makeImage(t *testing.T, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", "..", "-f", "deploy/deploy.mk", "image",
		"IMAGE_OUT="+out, "IMAGE_REF="+testRef, "IMAGE_VERSION="+testVersion, "IMAGE_EPOCH="+strconv.Itoa(testEpoch))
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, b)
	}
	t.Logf("make image took %v", time.Since(start).Round(time.Millisecond))
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkImageConfig: the config is what deploy/Dockerfile sets, for the requested version, time and architecture.
func checkImageConfig(t *testing.T, img v1.Image, arch string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseDockerfile("Dockerfile", testVersion)
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, want.Entrypoint) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want the Dockerfile's %q and no cmd", c.Entrypoint, c.Cmd, want.Entrypoint)
	}
	if c.User != want.User || c.WorkingDir != want.WorkingDir {
		t.Errorf("user %q workdir %q, want the Dockerfile's %q, %q", c.User, c.WorkingDir, want.User, want.WorkingDir)
	}
	if !slices.Equal(c.Env, want.Env) {
		t.Errorf("env = %q, want the Dockerfile's %q", c.Env, want.Env)
	}
	if len(c.Labels) != len(want.Labels) {
		t.Errorf("labels = %q, want the Dockerfile's %q", c.Labels, want.Labels)
	}
	for k, v := range want.Labels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want the Dockerfile's %q", k, c.Labels[k], v)
		}
	}
	if cf.OS != "linux" || cf.Architecture != arch || cf.Created.Unix() != testEpoch {
		t.Errorf("platform %s/%s created %v, want linux/%s created at %d", cf.OS, cf.Architecture, cf.Created.Time, arch, testEpoch)
	}
}

// unpackOnly unpacks the image's single layer under root, checking that it holds exactly the binary and the
// node-cache alias: no shell, no iptables, no nft, nothing else.
func unpackOnly(t *testing.T, img v1.Image, root string) {
	t.Helper()
	hdrs, files := imagetest.Layer(t, img)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hdrs {
		got = append(got, h.Name)
		switch base := path.Base(h.Name); {
		case slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox", "nft", "ip", "xtables-nft-multi", "xtables-legacy-multi"}, base),
			strings.HasPrefix(base, "iptables"), strings.HasPrefix(base, "ip6tables"):
			t.Errorf("image contains %s", h.Name)
		}
		switch {
		case h.Name == image.BinaryName && h.Typeflag == tar.TypeReg && h.Mode == 0o755 && h.Uid == 0:
			if err := os.WriteFile(filepath.Join(root, h.Name), files[h.Name], 0o755); err != nil {
				t.Fatal(err)
			}
		case h.Name == image.AliasName && h.Typeflag == tar.TypeSymlink && h.Linkname == image.BinaryName:
			if err := os.Symlink(h.Linkname, filepath.Join(root, h.Name)); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("unexpected layer entry %q (type %c, mode %o, link %q)", h.Name, h.Typeflag, h.Mode, h.Linkname)
		}
	}
	if want := []string{image.BinaryName, image.AliasName}; !slices.Equal(got, want) {
		t.Fatalf("layer entries = %q, want exactly %q", got, want)
	}
}

// checkStaticBinary: an executable for machine, with no program interpreter and no shared libraries, so it
// runs on an empty filesystem.
func checkStaticBinary(t *testing.T, p string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s is ELF machine %s, want %s", p, f.Machine, machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP program header (%s): dynamically linked", p, image.Interpreter(f))
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) != 0 {
		t.Errorf("%s imports shared libraries %q (%v)", p, libs, err)
	}
}

// TestDefaultImageRef: the manifests run the image `make image` tags by default.
func TestDefaultImageRef(t *testing.T) {
	if got := makeVar(t, "IMAGE_REF"); got != image.DefaultRef {
		t.Errorf("deploy.mk IMAGE_REF = %q, want image.DefaultRef %q", got, image.DefaultRef)
	}
	for _, v := range variants {
		m, err := decodeStrict(render(t, v.dir))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.daemonSets["kube-system/node-local-dns"].Spec.Template.Spec.Containers[0].Image; got != image.DefaultRef {
			t.Errorf("%s: image %q, want %q", v.dir, got, image.DefaultRef)
		}
	}
}

// TestImageConfigMatchesDockerfile: the offline image and the Dockerfile describe the same container.
func TestImageConfigMatchesDockerfile(t *testing.T) {
	d, err := parseDockerfile("Dockerfile", "v1")
	if err != nil {
		t.Fatal(err)
	}
	lbl := image.Labels("v1")
	if !slices.Equal(d.Entrypoint, []string{image.Entrypoint}) || d.User != image.User || !slices.Equal(d.Env, image.Env()) ||
		len(d.Labels) != len(lbl) || d.WorkingDir != "/" {
		t.Errorf("Dockerfile: entrypoint %q user %q env %q workdir %q labels %q;\nimage: entrypoint %q user %q env %q workdir / labels %q",
			d.Entrypoint, d.User, d.Env, d.WorkingDir, d.Labels, image.Entrypoint, image.User, image.Env(), lbl)
	}
	for k, v := range lbl {
		if d.Labels[k] != v {
			t.Errorf("label %s: Dockerfile %q, image %q", k, d.Labels[k], v)
		}
	}
	if !bytes.Contains(mustRead(t, "Dockerfile"), []byte("ln -s "+image.BinaryName+" /rootfs/"+image.AliasName)) {
		t.Errorf("Dockerfile does not link /%s to %s", image.AliasName, image.BinaryName)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
