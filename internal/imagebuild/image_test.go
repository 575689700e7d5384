package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/diskimport/engine/internal/sandbox"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// hostRecipe is the recipe make image uses, with the importer replaced by
// a copy of a static program at importer (any static ELF will do here).
func hostRecipe(t *testing.T, importer string) Recipe {
	t.Helper()
	for _, p := range []string{"/usr/bin/qemu-img", "/usr/bin/xz", "/bin/busybox"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (apt-get install qemu-utils xz-utils busybox-static): %v", p, err)
		}
	}
	return Recipe{
		Importer:     importer,
		HostPrograms: []string{"/usr/bin/qemu-img", "/usr/bin/xz"},
		Busybox:      "/bin/busybox",
		Applets:      []string{"sh", "cp"},
		UID:          107,
		Source:       "https://github.com/diskimport/engine",
		Version:      "v0.0.0-test",
		Revision:     "0123456789abcdef0123456789abcdef01234567",
		Created:      time.Unix(1_764_000_000, 0),
		Licenses:     true,
	}
}

// copyStatic copies /bin/busybox (static) to dir/name with the given mode
// and mtime, standing in for bin/importer.
func copyStatic(t *testing.T, dir, name string, mode os.FileMode, mtime time.Time) string {
	t.Helper()
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImageIsReproducible(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first := hostRecipe(t, copyStatic(t, dir, "a", 0o700, time.Unix(1, 0)))
	second := hostRecipe(t, copyStatic(t, dir, "b", 0o755, time.Now()))

	var digests, archives [2]string
	for i, r := range []Recipe{first, second} {
		img, err := r.Image(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Summarize(img)
		if err != nil {
			t.Fatal(err)
		}
		digests[i] = s.Digest
		archive := filepath.Join(dir, "archive.tar")
		if err := WriteDockerArchive(archive, img, []string{"localhost/x:v", "localhost/x:latest"}, r.Created); err != nil {
			t.Fatal(err)
		}
		archives[i] = testimg.Digest(t, archive, -1)
		t.Logf("build %d: digest %s, %d bytes compressed, archive sha256 %s", i+1, s.Digest, s.CompressedSize, archives[i])
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds from the same files: digests %s and %s", digests[0], digests[1])
	}
	if archives[0] != archives[1] {
		t.Errorf("two builds from the same files: docker-archives differ")
	}
}

func TestImageContents(t *testing.T) {
	ctx := context.Background()
	r := hostRecipe(t, copyStatic(t, t.TempDir(), "importer", 0o755, time.Now()))
	img, err := r.Image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != "/usr/bin/importer" {
		t.Errorf("entrypoint %q", got)
	}
	if cfg.Config.User != "107:107" {
		t.Errorf("user %q, want 107:107", cfg.Config.User)
	}
	for k, want := range map[string]string{LabelSource: r.Source, LabelVersion: r.Version, LabelRevision: r.Revision} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if !cfg.Created.Time.Equal(r.Created) {
		t.Errorf("created %v, want %v", cfg.Created, r.Created)
	}
	files := imageFiles(t, img)
	for _, p := range []string{"/usr/bin/importer", "/usr/bin/qemu-img", "/usr/bin/xz", "/usr/bin/busybox", "/usr/bin/sh", "/usr/bin/cp", "/bin", "/tmp/", "/data/", "/scratch/", "/etc/passwd", "/usr/share/doc/qemu-utils/copyright"} {
		if files[p] == nil {
			t.Errorf("%s is missing from the image", p)
		}
	}
	if h := files["/data/"]; h != nil && (h.Uid != 107 || h.Gid != 107) {
		t.Errorf("/data owned by %d:%d, want 107:107", h.Uid, h.Gid)
	}
	if h := files["/tmp/"]; h != nil && h.Mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", h.Mode)
	}
	libs, err := sandbox.SharedLibraries(ctx, "/usr/bin/qemu-img")
	if err != nil {
		t.Fatal(err)
	}
	assertHostFilesIn(t, files, "qemu-img's", libs)
}

// assertHostFilesIn fails for each host file of paths (whose, for the
// message) that is not in files at the path it resolves to.
func assertHostFilesIn(t *testing.T, files map[string]*tar.Header, whose string, paths []string) {
	t.Helper()
	for _, p := range paths {
		resolved, _, err := resolveHostPath(p)
		if err != nil {
			t.Fatal(err)
		}
		if files[resolved] == nil {
			t.Errorf("%s %s (%s) is missing", whose, p, resolved)
		}
	}
}

// imageFiles is every path of img's layers, with its tar header.
func imageFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files["/"+h.Name] = h
		}
		rc.Close()
	}
	return files
}

// CDI's own images for the e2e timing run: no importer, CDI's programs,
// its cloner script, its entrypoint, and nbdkit's curl plugin (which
// nbdkit opens with dlopen) with the libraries it needs.
func TestImageOfOtherProgramsWithADlopenedPlugin(t *testing.T) {
	const nbdkit, curl = "/usr/bin/nbdkit", "/usr/lib/x86_64-linux-gnu/nbdkit/plugins/nbdkit-curl-plugin.so"
	for _, p := range []string{nbdkit, curl} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("apt-get install nbdkit: %v", err)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	r := hostRecipe(t, "")
	r.Programs = []Program{{Source: copyStatic(t, dir, "cdi-importer", 0o755, time.Now()), Path: "/usr/bin/cdi-importer"}}
	script := filepath.Join(dir, "cloner_startup.sh")
	if err := os.WriteFile(script, []byte("#!/bin/bash\necho cloner\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Scripts = []Program{{Source: script, Path: "/usr/bin/cloner_startup.sh"}}
	r.HostPrograms = append(r.HostPrograms, nbdkit)
	r.HostLibraries = []string{curl}
	r.Entrypoint = []string{"/usr/bin/cdi-importer", "-alsologtostderr"}
	r.Path = "/usr/sbin:/usr/bin:/bin"
	img, err := r.Image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; !slices.Equal(got, r.Entrypoint) {
		t.Errorf("entrypoint %q, want %q", got, r.Entrypoint)
	}
	if got := cfg.Config.Env; !slices.Contains(got, "PATH=/usr/sbin:/usr/bin:/bin") {
		t.Errorf("env %q, want PATH=/usr/sbin:/usr/bin:/bin", got)
	}
	files := imageFiles(t, img)
	for _, p := range []string{"/usr/bin/importer", "/usr/bin/cdi-uploadserver", "/usr/bin/cloner_startup.sh/"} {
		if files[p] != nil {
			t.Errorf("%s is in an image without the importer", p)
		}
	}
	if h := files["/usr/bin/cloner_startup.sh"]; h == nil || h.Mode != 0o755 || h.Size != int64(len("#!/bin/bash\necho cloner\n")) {
		t.Errorf("the script: %+v, want the file, mode 755", h)
	}
	if files["/usr/bin/cdi-importer"] == nil || files["/usr/bin/nbdkit"] == nil || files[curl] == nil {
		t.Error("cdi-importer, nbdkit or its curl plugin is missing")
	}
	loader, err := sandbox.Interpreter(nbdkit)
	if err != nil {
		t.Fatal(err)
	}
	libs, err := sandbox.LoadedLibraries(ctx, loader, curl)
	if err != nil {
		t.Fatal(err)
	}
	assertHostFilesIn(t, files, "the curl plugin's", libs)
	if !slices.ContainsFunc(libs, func(lib string) bool { return strings.HasPrefix(filepath.Base(lib), "libcurl") }) {
		t.Errorf("no libcurl among the plugin's libraries %q", libs)
	}
	if files["/usr/share/doc/nbdkit-plugin-libcurl/copyright"] == nil && files["/usr/share/doc/libcurl3-gnutls/copyright"] == nil {
		t.Error("no copyright file for the plugin's packages")
	}
}

func TestLayersAreGzipOnce(t *testing.T) {
	tr := NewTree()
	if err := tr.Bytes("/etc/hostname", []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Recipe{Created: time.Unix(0, 0)}.layer(tr)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatalf("the compressed blob is not gzip: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("etc/hostname")) {
		t.Error("the blob is not the tar, compressed once")
	}
}

// TestDynamicProgramBringsItsLibraries: a program of the project built
// from C (native/) goes in with every library its loader maps, as a host
// program's; without Dynamic a program that is not static is refused.
func TestDynamicProgramBringsItsLibraries(t *testing.T) {
	ctx := context.Background()
	// igzip stands in for diskimport-inflate: both link ISA-L.
	igzip, err := exec.LookPath("igzip")
	if err != nil {
		t.Skipf("igzip (Debian package isal) is not installed: %v", err)
	}
	r := hostRecipe(t, copyStatic(t, t.TempDir(), "importer", 0o755, time.Now()))
	r.Programs = []Program{{Source: igzip, Path: "/usr/bin/own-inflate"}}
	if _, err := r.Image(ctx); err == nil || !strings.Contains(err.Error(), "is not static") {
		t.Fatalf("a dynamic program not marked Dynamic: %v, want refused as not static", err)
	}
	r.Programs[0].Dynamic = true
	img, err := r.Image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files := imageFiles(t, img)
	if files["/usr/bin/own-inflate"] == nil {
		t.Error("/usr/bin/own-inflate is missing from the image")
	}
	libs, err := sandbox.SharedLibraries(ctx, igzip)
	if err != nil {
		t.Fatal(err)
	}
	assertHostFilesIn(t, files, "the program's", libs)
	if !slices.ContainsFunc(libs, func(lib string) bool { return strings.Contains(lib, "libisal") }) {
		t.Errorf("igzip's libraries %v name no libisal: the test shows nothing", libs)
	}
}
