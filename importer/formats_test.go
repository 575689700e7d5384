package importer_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testtar"
)

// Issue 9: formats and sources that used to end in a false "complete".

// sources names one image three ways: the local file, the same file over
// HTTP (byte ranges served), and its xz form over HTTP (a stream through
// scratch or straight to the target).
func sources(t *testing.T, path string) map[string]string {
	t.Helper()
	testimg.Compress(t, path, "xz")
	base := testimg.Serve(t, filepath.Dir(path))
	name := filepath.Base(path)
	return map[string]string{"file": path, "http": base + name, "http-xz": base + name + ".xz"}
}

// qemuRaw is what qemu-img convert -O raw makes of path.
func qemuRaw(t *testing.T, path, qfmt string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "qemu.raw")
	testimg.Run(t, "qemu-img", "convert", "-q", "-f", qfmt, "-O", "raw", path, out)
	return out
}

// refusedFromEverySource runs importRefused on each of sources(path), a
// subtest each.
func refusedFromEverySource(t *testing.T, path string, want error, cause string) {
	for how, src := range sources(t, path) {
		t.Run(how, func(t *testing.T) { importRefused(t, src, want, cause) })
	}
}

// equalsQemuFromEverySource runs importEqualsQemu on each of
// sources(path), a subtest each.
func equalsQemuFromEverySource(t *testing.T, path, want string) {
	for how, src := range sources(t, path) {
		t.Run(how, func(t *testing.T) { importEqualsQemu(t, src, want) })
	}
}

// importRefused imports source onto a file and expects the sentinel want
// and a message naming the cause.
func importRefused(t *testing.T, source string, want error, cause string) {
	t.Helper()
	err := importFails(t, importer.Options{Source: source}, want)
	assert.Contains(t, err.Error(), cause)
}

func TestForeignFormatsRefused(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	cases := map[string]string{
		"ostest/standard.qed":       "qed",
		"qemu/parallels-v1":         "parallels",
		"qemu/parallels-v2":         "parallels",
		"dissect/expanding.hds":     "parallels",
		"qemu/empty.bochs":          "bochs",
		"qemu/simple-pattern.cloop": "cloop",
		"qemu/simple-dmg.dmg":       "dmg",
		"tsk/image.qcow":            "qcow",
		"luks":                      "luks",
	}
	for rel, name := range cases {
		t.Run(rel, func(t *testing.T) {
			dir := t.TempDir()
			var p string
			if rel == "luks" {
				p = filepath.Join(dir, "disk.luks")
				testimg.LUKS(t, p)
			} else {
				p = testimg.SharedImage(t, dir, rel)
			}
			refusedFromEverySource(t, p, importer.ErrUnsupportedFormat, "Invalid format "+name+" for image")
		})
	}
}

// TestDMGOntoDeviceLeavesNoHead: a DMG is known only at its end. A local
// one is refused from its last sector before anything is written; a stream
// is refused at its end, when most of it is on the device but not its
// first MiB, so the device keeps its old head. Nothing is reported complete.
func TestDMGOntoDeviceLeavesNoHead(t *testing.T) {
	testimg.Need(t, "xz")
	dir := t.TempDir()
	p := testimg.SharedImage(t, dir, "qemu/simple-dmg.dmg")
	dev := testimg.LoopDevice(t, dir, 8<<20)
	err := importFailsWith(t, importer.Options{Source: p, Target: dev})
	assert.ErrorIs(t, err, importer.ErrUnsupportedFormat)
	assertPattern(t, dev, 0, 8<<20)

	xz := testimg.Compress(t, p, "xz")
	err = importFailsWith(t, importer.Options{Source: xz, Target: dev})
	assert.ErrorIs(t, err, importer.ErrUnsupportedFormat)
	assertPattern(t, dev, 0, 1<<20)
}

func TestISOWithQCOW2HeaderRefused(t *testing.T) {
	testimg.Need(t, "xz")
	p := testimg.SharedImage(t, t.TempDir(), "ostest/iso-with-qcow2-in-system.iso")
	refusedFromEverySource(t, p, importer.ErrUnsafeImage, "more than one format (qcow2, iso)")
}

// assertPattern fails unless dev still holds the 0xA5 fill LoopDevice put
// there in [off, off+n).
func assertPattern(t *testing.T, dev string, off, n int64) {
	t.Helper()
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, n)
	_, err = f.ReadAt(buf, off)
	require.NoError(t, err)
	require.True(t, bytes.Equal(buf, bytes.Repeat([]byte{0xA5}, int(n))), "the device's old data at %d..%d was overwritten", off, off+n)
}

func TestEmptySourceRefused(t *testing.T) {
	testimg.Need(t, "zstd", "gzip", "xz", "pzstd")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.img")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	for _, tool := range []string{"gzip", "xz", "zstd", "pzstd"} {
		out, err := exec.Command(tool, "-c", empty).Output()
		require.NoError(t, err, tool)
		require.NoError(t, os.WriteFile(empty+"."+tool, out, 0o644))
	}
	base := testimg.Serve(t, dir)
	sources := map[string]func() importer.Options{
		"file":       func() importer.Options { return importer.Options{Source: empty} },
		"file-xz":    func() importer.Options { return importer.Options{Source: empty + ".xz"} },
		"http":       func() importer.Options { return importer.Options{Source: base + "empty.img"} },
		"http-gzip":  func() importer.Options { return importer.Options{Source: base + "empty.img.gzip"} },
		"http-zstd":  func() importer.Options { return importer.Options{Source: base + "empty.img.zstd"} },
		"http-pzstd": func() importer.Options { return importer.Options{Source: base + "empty.img.pzstd"} },
		"stdin": func() importer.Options {
			r, w, err := os.Pipe()
			require.NoError(t, err)
			w.Close()
			t.Cleanup(func() { r.Close() })
			return importer.Options{Source: "-", SourceReader: r}
		},
	}
	for name, opts := range sources {
		t.Run(name+"-to-file", func(t *testing.T) {
			o := opts()
			importRefusedOpts(t, o, "the source is empty")
		})
		t.Run(name+"-to-device", func(t *testing.T) {
			dev := testimg.LoopDevice(t, t.TempDir(), 4<<20)
			o := opts()
			o.Target = dev
			err := importFailsWith(t, o)
			assert.ErrorIs(t, err, importer.ErrInvalidImage)
			assert.Contains(t, err.Error(), "the source is empty")
			assertPattern(t, dev, 0, 4<<20)
		})
	}
	t.Run("http-no-length", func(t *testing.T) {
		// A chunked response of no bytes: the size is not known up front.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.(http.Flusher).Flush()
		}))
		t.Cleanup(srv.Close)
		importRefusedOpts(t, importer.Options{Source: srv.URL + "/disk.img"}, "the source is empty")
	})
}

func importRefusedOpts(t *testing.T, o importer.Options, cause string) {
	t.Helper()
	err := importFails(t, o, importer.ErrInvalidImage)
	assert.Contains(t, err.Error(), cause)
}

// importEqualsQemu imports source onto a new file and compares it byte for
// byte with qemu-img's own raw conversion.
func importEqualsQemu(t *testing.T, source, want string) {
	t.Helper()
	target := filepath.Join(t.TempDir(), "disk.img")
	res, err := importer.Import(context.Background(), importer.Options{Source: source, Target: target, TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	require.True(t, res.Complete)
	expectImage(t, want, target, false)
}

func TestPzstdImported(t *testing.T) {
	testimg.Need(t, "qemu-img", "pzstd")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 12<<20, 91)
	for _, p := range []string{raw, q} {
		testimg.Run(t, "pzstd", "-q", "-f", p, "-o", p+".zst")
	}
	base := testimg.Serve(t, dir)
	for name, src := range map[string]string{
		"raw-file": raw + ".zst", "raw-http": base + "disk.raw.zst",
		"qcow2-file": q + ".zst", "qcow2-http": base + "disk.qcow2.zst",
	} {
		t.Run(name, func(t *testing.T) { importEqualsQemu(t, src, raw) })
	}
	t.Run("raw-to-device", func(t *testing.T) {
		dev := testimg.LoopDevice(t, t.TempDir(), 16<<20)
		res, err := importer.Import(context.Background(), importer.Options{Source: raw + ".zst", Target: dev, Logger: testimg.Logger(t)})
		require.NoError(t, err)
		require.True(t, res.Complete)
		expectImage(t, raw, dev, true)
	})
}

// TestExtendedL2Imported: qcow2 images with subclusters, real ones and
// ones whose last cluster is partial, import as qemu-img converts them; one
// cut inside its last allocated subcluster is refused.
func TestExtendedL2Imported(t *testing.T) {
	testimg.Need(t, "qemu-img", "qemu-io", "xz")
	dir := t.TempDir()
	images := map[string]string{}
	for _, cs := range []string{"16384", "65536"} {
		for _, cp := range []string{"off", "on"} {
			rel := fmt.Sprintf("slx/image_cs-%s_cp-%s_l2-on.qcow2", cs, cp)
			images[rel] = testimg.SharedImage(t, t.TempDir(), rel)
		}
	}
	partial := filepath.Join(t.TempDir(), "partial.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "extended_l2=on,cluster_size=64k", partial, "8M")
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 7M 6k", partial)
	images["partial"] = partial
	for name, p := range images {
		t.Run(name, func(t *testing.T) {
			want := qemuRaw(t, p, "qcow2")
			equalsQemuFromEverySource(t, p, want)
		})
	}
	t.Run("partial-truncated", func(t *testing.T) {
		b, err := os.ReadFile(partial)
		require.NoError(t, err)
		cut := filepath.Join(dir, "cut.qcow2")
		require.NoError(t, os.WriteFile(cut, b[:len(b)-100], 0o644))
		for how, src := range sources(t, cut) {
			// xz over HTTP is decoded straight onto the target: the
			// decoder names the cluster past the end of the stream.
			msg := map[bool]string{true: "lies past the end of the", false: "allocated subcluster"}[how == "http-xz"]
			t.Run(how, func(t *testing.T) { importRefused(t, src, importer.ErrInvalidImage, msg) })
		}
	})
}

// TestTruncatedVHDAndVDIRefused: a dynamic VHD cut inside the last sector
// of its last block and a VDI cut anywhere in its data convert
// "successfully" with qemu-img; the import refuses them on every path, and
// imports the uncut images as qemu-img converts them.
func TestTruncatedVHDAndVDIRefused(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	for _, tc := range []struct{ qfmt, ext string }{{"vpc", "vhd"}, {"vdi", "vdi"}} {
		t.Run(tc.ext, func(t *testing.T) {
			dir := t.TempDir()
			raw := testimg.Raw(t, dir, "disk.raw", 6<<20, 17)
			img := testimg.Convert(t, raw, filepath.Join(dir, "good."+tc.ext), tc.qfmt)
			want := qemuRaw(t, img, tc.qfmt)
			for how, src := range sources(t, img) {
				t.Run("good-"+how, func(t *testing.T) { importEqualsQemu(t, src, want) })
			}
			b, err := os.ReadFile(img)
			require.NoError(t, err)
			cut := len(b) - 1 // VDI: the last byte of the last block
			if tc.qfmt == "vpc" {
				cut = len(b) - 512 - 100 // inside the last block, before the footer copy
			}
			bad := filepath.Join(t.TempDir(), "cut."+tc.ext)
			require.NoError(t, os.WriteFile(bad, b[:cut], 0o644))
			for how, src := range sources(t, bad) {
				t.Run("cut-"+how, func(t *testing.T) { importRefused(t, src, importer.ErrInvalidImage, "past the end") })
			}
		})
	}
}

// TestRealVHDImported: dynamic VHD and VHDX files from dissect's test data
// pass the new checks and import as qemu-img converts them (the 127 GiB
// Virtual PC and Hyper-V samples are checked in format's unit tests).
func TestRealVHDImported(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	for rel, qfmt := range map[string]string{"dissect/dynamic.vhd": "vpc", "dissect/dynamic.vhdx": "vhdx", "dissect/fixed.vhdx": "vhdx"} {
		t.Run(rel, func(t *testing.T) {
			p := testimg.SharedImage(t, t.TempDir(), rel)
			want := qemuRaw(t, p, qfmt)
			equalsQemuFromEverySource(t, p, want)
		})
	}
}

// TestDifferencingVHDXRefused: a differencing VHDX names its parent; it is
// refused as unsafe on every path, not left to qemu-img's "Operation not
// supported".
func TestDifferencingVHDXRefused(t *testing.T) {
	testimg.Need(t, "xz")
	p := testimg.SharedImage(t, t.TempDir(), "dissect/differencing.avhdx")
	refusedFromEverySource(t, p, importer.ErrUnsafeImage, "differencing disk refers to a parent image")
}

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
				assert.Equal(t, c.reason, importer.Reason(err))
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
	gce := testimg.Compress(t, testtar.Write(t, dir, "gce.tar", []testtar.Member{testtar.File("disk.raw", disk)}), "gz")
	testtar.Write(t, dir, "vm.ova", []testtar.Member{
		testtar.File("vm.ovf", []byte("<?xml version=\"1.0\"?>\n<Envelope/>\n")), testtar.File("disk1.vmdk", vmdk), testtar.File("vm.mf", []byte("SHA256(disk1.vmdk)= 0\n"))})
	base := testimg.Serve(t, dir)
	cases := []struct {
		name, file, format string
		layers             []string
	}{
		{"GCE tar.gz", filepath.Base(gce), "raw", []string{"gz", "tar"}},
		{"OVA", "vm.ova", "vmdk", []string{"tar"}},
	}
	for _, c := range cases {
		for _, src := range []string{filepath.Join(dir, c.file), base + c.file} {
			testimg.ForEachTarget(t, c.name, imageSize+1<<20, func(t *testing.T, tg testimg.Target) {
				dst := tg.Path
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
	src := testimg.Compress(t, testtar.Write(t, dir, "image.tar", []testtar.Member{testtar.File("disk.raw", disk)}), "gz")
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
