package importer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/internal/testtar"
)

const notFoundPage = "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head><body><h1>It works</h1></body></html>\n"

// notImages are sources that are not a disk image, each with the sentinel
// and reason it is refused with. Made at test time from a raw disk.
func notImages(t *testing.T, dir string) []struct {
	name, file, contentType string
	kind                    error
	reason, message         string
} {
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 21)
	disk, err := os.ReadFile(raw)
	require.NoError(t, err)
	write := func(name string, b []byte) string {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
		return name
	}
	bz, err := exec.Command("bzip2", "-c", raw).Output()
	require.NoError(t, err, "bzip2")
	zb := testimg.Zip(t, "disk.raw", disk)
	return []struct {
		name, file, contentType string
		kind                    error
		reason, message         string
	}{
		{"html page", write("page.html", []byte(notFoundPage)), "text/html", importer.ErrTextNotImage, "TextNotImage", "text"},
		{"bzip2", write("disk.raw.bz2", bz), "application/x-bzip2", importer.ErrCompressedFile, "UnsupportedCompression", "a bzip2 file, not a disk image (decompress it first)"},
		{"zip", write("disk.zip", zb), "application/zip", importer.ErrArchiveFile, "ArchiveNotImage", "a zip archive, not a disk image"},
		{"tar without a disk", write("notes.tar", testtar.Build(t, []testtar.Member{testtar.File("a.txt", []byte("notes\n")), testtar.File("b.ovf", []byte("<Envelope/>\n"))})),
			"application/x-tar", importer.ErrNoDiskInArchive, "NoDiskInArchive", "no disk image (it holds a.txt, b.ovf)"},
		{"tar of two disks", write("two.tar", testtar.Build(t, []testtar.Member{testtar.File("disk1.raw", disk), testtar.File("disk2.raw", disk)})),
			"application/x-tar", importer.ErrSeveralDisksInArchive, "SeveralDisksInArchive", "more than one disk image (disk1.raw, disk2.raw)"},
	}
}

// serveTyped serves dir's files with the given Content-Type.
func serveTyped(t *testing.T, dir string, types map[string]string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := filepath.Base(r.URL.Path)
		if ct, ok := types[name]; ok {
			w.Header().Set("Content-Type", ct)
		}
		http.ServeFile(w, r, filepath.Join(dir, name))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// Nothing that is not a disk image is imported: from a file and over HTTP
// each is refused with its own sentinel and reason, nothing is reported
// complete and no target is left; forced raw, the bytes are imported as
// they are.
func TestNotADiskImageRefused(t *testing.T) {
	testimg.Need(t, "bzip2")
	dir := t.TempDir()
	cases := notImages(t, dir)
	types := map[string]string{}
	for _, c := range cases {
		types[c.file] = c.contentType
	}
	base := serveTyped(t, dir, types)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, src := range []string{filepath.Join(dir, c.file), base + c.file} {
				err := importFails(t, importer.Options{Source: src}, c.kind)
				assert.ErrorIs(t, err, importer.ErrUnsupportedFormat)
				assert.Contains(t, err.Error(), c.message)
				assert.Equal(t, c.reason, cdi.Reason(err))
			}
			target := filepath.Join(t.TempDir(), "disk.img")
			res, err := importer.Import(context.Background(), importer.Options{Source: base + c.file, Target: target, TargetOptions: importer.TargetOptions{FormatIn: "raw"}, Logger: testimg.Logger(t)})
			require.NoError(t, err)
			assert.Equal(t, "raw", res.SourceFormat)
			want, err := os.ReadFile(filepath.Join(dir, c.file))
			require.NoError(t, err)
			got, err := os.ReadFile(target)
			require.NoError(t, err)
			assert.Equal(t, want, got[:len(want)], "forced raw: the bytes as they are")
		})
	}
	t.Run("text page wording", func(t *testing.T) {
		err := importFails(t, importer.Options{Source: base + "page.html"}, importer.ErrTextNotImage)
		assert.Contains(t, err.Error(), "the server returned a text page (Content-Type text/html), not a disk image")
		err = importFails(t, importer.Options{Source: filepath.Join(dir, "page.html")}, importer.ErrTextNotImage)
		assert.Contains(t, err.Error(), "the source is text, not a disk image")
	})
	t.Run("only raw can be forced", func(t *testing.T) {
		importFails(t, importer.Options{Source: filepath.Join(dir, "disk.raw"), TargetOptions: importer.TargetOptions{FormatIn: "qcow2"}}, importer.ErrInvalidOptions)
	})
}

// A tar holding one disk imports that disk, its format detected inside the
// chain (gz → tar → member): GCE's disk.raw in a .tar.gz, an OVA's
// streamOptimized vmdk; the content is the disk's, byte for byte, from a
// file and over HTTP, onto a file and a loop device.
func TestTarOfOneDiskImportsTheDisk(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 22)
	disk, err := os.ReadFile(raw)
	require.NoError(t, err)
	vmdk, err := os.ReadFile(testimg.Convert(t, raw, filepath.Join(dir, "disk1.vmdk"), "vmdk", "subformat=streamOptimized"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gce.tar"), testtar.Build(t, []testtar.Member{testtar.File("disk.raw", disk)}), 0o644))
	gce := testimg.Compress(t, filepath.Join(dir, "gce.tar"), "gz")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vm.ova"), testtar.Build(t, []testtar.Member{
		testtar.File("vm.ovf", []byte("<?xml version=\"1.0\"?>\n<Envelope/>\n")), testtar.File("disk1.vmdk", vmdk), testtar.File("vm.mf", []byte("SHA256(disk1.vmdk)= 0\n"))}), 0o644))
	base := testimg.Serve(t, dir)
	cases := []struct {
		name, file, format string
		layers             []string
	}{
		{"GCE tar.gz", filepath.Base(gce), "raw", []string{"gz", "tar"}},
		{"OVA", "vm.ova", "vmdk", []string{"tar"}},
	}
	targets := map[string]func(t *testing.T) string{"file": func(t *testing.T) string { return filepath.Join(t.TempDir(), "disk.img") }}
	if os.Geteuid() == 0 {
		targets["loop"] = func(t *testing.T) string { return testimg.LoopDevice(t, t.TempDir(), imageSize+1<<20) }
	}
	for _, c := range cases {
		for _, src := range []string{filepath.Join(dir, c.file), base + c.file} {
			for kind, target := range targets {
				t.Run(c.name+"/"+kind, func(t *testing.T) {
					dst := target(t)
					res, err := importer.Import(context.Background(), importer.Options{Source: src, Target: dst, TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}, Logger: testimg.Logger(t)})
					require.NoError(t, err, src)
					require.True(t, res.Complete)
					assert.Equal(t, c.format, res.SourceFormat)
					assert.Equal(t, c.layers, res.Compressions)
					assert.Equal(t, testimg.Digest(t, raw, imageSize), testimg.Digest(t, dst, imageSize), "the disk's bytes")
				})
			}
		}
	}
}

// A tar of two disks is refused at the second, after the first was
// streamed: onto a device, its first MiB (held back until the end) is
// never written, and what the device held there was zeroed before the
// first write.
func TestTarOfTwoDisksLeavesTheDeviceHeadZeroed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 23)
	disk, err := os.ReadFile(raw)
	require.NoError(t, err)
	two := filepath.Join(dir, "two.tar")
	require.NoError(t, os.WriteFile(two, testtar.Build(t, []testtar.Member{testtar.File("a.raw", disk), testtar.File("b.raw", disk)}), 0o644))
	dev := testimg.LoopDevice(t, t.TempDir(), imageSize+1<<20)
	res, err := importer.Import(context.Background(), importer.Options{Source: two, Target: dev, Logger: testimg.Logger(t)})
	require.ErrorIs(t, err, importer.ErrSeveralDisksInArchive)
	assert.False(t, res.Complete)
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	head := make([]byte, 1<<20)
	_, err = f.ReadAt(head, 0)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 1<<20), head, "the device's first MiB zeroed")
}

// A raw disk in a tar has its size in the member's header: one too big for
// the target is refused in Info, before a byte is written, even inside a
// gzip of unknown decompressed size.
func TestTarOfARawDiskTooBigRefusedBeforeWriting(t *testing.T) {
	testimg.Need(t, "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 3<<20, 24)
	disk, err := os.ReadFile(raw)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "image.tar"), testtar.Build(t, []testtar.Member{testtar.File("disk.raw", disk)}), 0o644))
	src := testimg.Compress(t, filepath.Join(dir, "image.tar"), "gz")
	target := filepath.Join(t.TempDir(), "disk.img")
	res, err := importer.Import(context.Background(), importer.Options{Source: src, Target: target, TargetOptions: importer.TargetOptions{Size: 2 << 20}, Logger: testimg.Logger(t)})
	var se *importer.SizeError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, int64(3<<20), se.ImageSize)
	assert.Contains(t, err.Error(), "(3.0 MiB for 2.0 MiB, 1048576 bytes short)")
	assert.NotContains(t, res.Phases, importer.PhaseTransferDataFile, "refused in Info")
	assert.Zero(t, res.BytesWritten)
	assert.NoFileExists(t, target)
}
