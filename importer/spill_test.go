package importer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/errtable"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/streamdecode"
	"github.com/diskimport/engine/internal/testkit/hostileimg"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// The stream decoder's spill: clusters that arrive before their tables go
// to the scratch directory past the decoder's memory bound, and only then
// is scratch used.

const spillBound = 1 << 20

// TestStreamDecodeSpills: with a 1 MiB bound, a qcow2 whose tables come
// late is decoded in one pass over HTTP and from stdin; what was spilled is
// reported and gone afterwards.
func TestStreamDecodeSpills(t *testing.T) {
	url, gz, want := servedLateTables(t)
	for _, srcName := range []string{"http", "stdin", "stdin-block"} {
		t.Run(srcName, func(t *testing.T) {
			block := strings.HasSuffix(srcName, "-block")
			var logs bytes.Buffer
			o := loggedImport(t, url, filepath.Join(t.TempDir(), "disk.img"), &logs)
			if block {
				o.Target = testimg.LoopDevice(t, t.TempDir(), 8<<20)
			}
			if strings.HasPrefix(srcName, "stdin") {
				o.Source, o.SourceReader = "-", pipeOf(t, gz)
			}
			res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
			require.NoError(t, err)
			assert.Equal(t, streamDecodePhases, res.Phases)
			assert.True(t, res.ScratchUsed)
			assert.Greater(t, res.ScratchBytes, int64(spillBound), "the late table's data went to the spill file")
			assert.Contains(t, logs.String(), "spilled to the scratch directory")
			expectImage(t, want, o.Target, block)
			assertEmptyDir(t, o.ScratchDir)
		})
	}
}

// pipeOf feeds path through an os.Pipe, as stdin would be.
func pipeOf(t *testing.T, path string) *os.File {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	go func() {
		_, _ = w.Write(data)
		w.Close()
	}()
	t.Cleanup(func() { r.Close() })
	return r
}

// TestStreamDecodeOverflowWithoutScratch: without a usable scratch
// directory, an HTTP source is started over on the scratch route (which
// reports that scratch is required), and a one-time
// stream fails at once with ErrScratchSpaceRequired naming the source and
// the bytes; neither leaves anything on the target.
func TestStreamDecodeOverflowWithoutScratch(t *testing.T) {
	url, gz, _ := servedLateTables(t)
	for _, srcName := range []string{"http", "stdin", "stdin-block", "http-block"} {
		t.Run(srcName, func(t *testing.T) {
			block := strings.HasSuffix(srcName, "-block")
			srcName = strings.TrimSuffix(srcName, "-block")
			var logs bytes.Buffer
			o := importer.Options{Source: url, TargetOptions: importer.TargetOptions{
				ScratchDir: filepath.Join(t.TempDir(), "none"),
			}, Logger: logTo(t, &logs),
				Target: filepath.Join(t.TempDir(), "disk.img")}
			if block {
				o.Target = testimg.LoopDevice(t, t.TempDir(), 8<<20)
			}
			if srcName == "stdin" {
				o.Source, o.SourceReader = "-", pipeOf(t, gz)
			}
			res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
			t.Log(err)
			require.ErrorIs(t, err, errdefs.ErrScratchSpaceRequired)
			assert.False(t, res.Complete)
			// CDI's handshake: the controller adds a scratch volume.
			assert.Equal(t, errtable.ScratchSpaceRequired, errtable.Classify(err))
			if srcName == "http" {
				assert.Contains(t, logs.String(), "cannot be decoded in one pass; starting the import over")
				assert.Contains(t, res.Phases, importer.PhaseTransferScratch)
			} else {
				assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseError}, res.Phases)
				assert.Contains(t, err.Error(), "from standard input")
				assert.Contains(t, err.Error(), "bytes of scratch space")
			}
			if block {
				// The decoder held the device's head: it still
				// holds what was there before.
				assertPattern(t, o.Target, 0, 1<<20)
			} else {
				assertEmptyDir(t, filepath.Dir(o.Target))
			}
		})
	}
}

// TestStreamDecodeSnapshots: a qcow2 with internal snapshots, written to
// before and after them, is decoded as a stream (the active layer only),
// from HTTP and from stdin, with and without a spill; its bytes are
// qemu-img's.
func TestStreamDecodeSnapshots(t *testing.T) {
	testimg.Need(t, "qemu-img", "qemu-io", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "snap.raw", imageSize, 48)
	img := testimg.Convert(t, raw, filepath.Join(dir, "snap.qcow2"), "qcow2")
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x31 512k 64k", img)
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s1", img)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x32 1M 128k", "-c", "write -z 2M 64k", img)
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s2", img)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x33 5M 64k", img)
	want := qemuRaw(t, img, "qcow2")
	gz := testimg.Compress(t, img, "gz")
	base := testimg.Serve(t, dir)
	for _, srcName := range []string{"http", "stdin"} {
		for _, bound := range []int64{0, spillBound} {
			t.Run(srcName+"/"+map[bool]string{true: "spill", false: "memory"}[bound > 0], func(t *testing.T) {
				var logs bytes.Buffer
				o := loggedImport(t, base+filepath.Base(gz), filepath.Join(t.TempDir(), "disk.img"), &logs)
				if srcName == "stdin" {
					o.Source, o.SourceReader = "-", pipeOf(t, gz)
				}
				res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, bound))
				require.NoError(t, err)
				assert.Equal(t, streamDecodePhases, res.Phases)
				assert.Equal(t, bound > 0, res.ScratchUsed, "spilled %d", res.ScratchBytes)
				expectImage(t, want, o.Target, false)
				assertEmptyDir(t, o.ScratchDir)
			})
		}
	}
}

// lateL2QCOW2 writes a 16 MiB-disk qcow2 whose L2 table comes after its
// data clusters and filler bytes of no table, compressed with zstd; it
// returns the image and the disk's digest.
func lateL2QCOW2(t *testing.T, dir string, filler int64) (string, string) {
	const vsize = 16 << 20
	disk, clusters := hostileimg.Disk(vsize>>16, 3)
	raw := filepath.Join(dir, "disk.raw")
	require.NoError(t, os.WriteFile(raw, disk, 0o644))
	img := filepath.Join(dir, "late.qcow2")
	f, err := os.Create(img)
	require.NoError(t, err)
	_, err = hostileimg.QCOW2{VirtualSize: vsize, Clusters: clusters, Filler: filler, L2AfterFiller: true}.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return testimg.Compress(t, img, "zst"), testimg.Digest(t, raw, -1)
}

// TestStreamDecodeSpillLimit: the decoder's spill never exceeds the
// image's virtual size, nor Options.MaxSpill. 32 MiB of filler before
// the L2 table of a 16 MiB disk, arriving from stdin, fails once 16 MiB
// are spilled, saying why (the decoder spilled all of it); a legitimate
// late L2 table within the cap imports, and fails past a smaller cap. The
// same filler image over HTTP, which can be read again, is imported
// through scratch and qemu-img.
func TestStreamDecodeSpillLimit(t *testing.T) {
	testimg.Need(t, "zstd", "qemu-img")
	dir := t.TempDir()
	filler, fillerWant := lateL2QCOW2(t, t.TempDir(), 32<<20)
	late, lateWant := lateL2QCOW2(t, dir, 0)
	run := func(t *testing.T, src string, maxSpill int64) (*importer.Result, error, string) {
		o := importer.Options{Source: "-", SourceReader: pipeOf(t, src), TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
			MaxSpill:   maxSpill,
		},
			Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t)}
		res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
		assertEmptyDir(t, o.ScratchDir)
		return res, err, o.Target
	}
	t.Run("filler-from-stdin", func(t *testing.T) {
		res, err, _ := run(t, filler, 0)
		require.Error(t, err)
		assert.ErrorIs(t, err, errdefs.ErrNotStreamable)
		assert.Contains(t, err.Error(), "virtual size, 16777216 bytes")
		assert.LessOrEqual(t, res.ScratchBytes, int64(16<<20))
		assert.False(t, res.Complete)
	})
	t.Run("late-l2-within-the-disk", func(t *testing.T) {
		res, err, target := run(t, late, 0)
		require.NoError(t, err)
		assert.True(t, res.ScratchUsed)
		assert.Equal(t, lateWant, testimg.Digest(t, target, -1))
	})
	t.Run("late-l2-past-the-cap", func(t *testing.T) {
		_, err, _ := run(t, late, 2<<20)
		require.Error(t, err)
		assert.ErrorIs(t, err, errdefs.ErrNotStreamable)
		assert.Contains(t, err.Error(), "configured spill limit")
	})
	t.Run("filler-over-http", func(t *testing.T) {
		base := testimg.Serve(t, filepath.Dir(filler))
		o := importer.Options{Source: base + filepath.Base(filler), TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		},
			Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t)}
		res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
		require.NoError(t, err)
		assert.Contains(t, res.Phases, importer.PhaseTransferScratch, "not imported through scratch")
		assert.Equal(t, fillerWant, testimg.Digest(t, o.Target, -1))
		assertEmptyDir(t, o.ScratchDir)
	})
	t.Run("negative-cap", func(t *testing.T) {
		_, err := importer.Import(context.Background(), importer.Options{Source: late, Target: filepath.Join(t.TempDir(), "d.img"), TargetOptions: importer.TargetOptions{MaxSpill: -1}})
		assert.ErrorIs(t, err, importer.ErrInvalidOptions)
	})
}

// Issue 14's "no scratch for streamed images": every qcow2, streamOptimized
// vmdk, dynamic vhd, vdi and vhdx of the real-image corpus (and a set of
// generated layouts: compressed clusters, tables after their data,
// internal snapshots) imported as a stream — over HTTP without byte
// ranges and through a pipe as stdin or an upload would be — with a
// scratch directory set, writes no byte of scratch: ScratchUsed is false,
// the directory stays empty, and the target is `qemu-img convert -O raw`
// of the image byte for byte.

// noScratchCorpus is the rows of the real-image table that have, or will
// have, a stream decoder: qcow2, streamOptimized vmdk, dynamic vhd, vdi,
// vhdx.
// Refused images are not in it.
func noScratchCorpus() []realImage {
	var rows []realImage
	for _, img := range realImages {
		if !img.convertible() {
			continue
		}
		switch {
		case img.format == "qcow2", img.streamOptimized, img.format == "vhd", img.format == "vdi", img.format == "vhdx":
			rows = append(rows, img)
		}
	}
	return rows
}

func TestNoScratchForStreamedImages(t *testing.T) {
	testimg.Need(t, "qemu-img", "qemu-io", "xz", "gzip")
	t.Run("corpus", func(t *testing.T) {
		stored, err := filepath.Abs(realImagesDir)
		require.NoError(t, err)
		if _, err := os.Stat(filepath.Join(stored, "SOURCES.md")); err != nil {
			t.Skipf("no real images at %s: %v", stored, err)
		}
		lib := newImageLibrary(stored, t.TempDir())
		served := filepath.Join(lib.cache, "img")
		require.NoError(t, os.MkdirAll(served, 0o755))
		streamURL := serve(t, streamOnlyHandler(served))
		rows := noScratchCorpus()
		require.NotEmpty(t, rows)
		for _, img := range rows {
			t.Run(img.name(), func(t *testing.T) {
				t.Parallel()
				local := lib.local(t, img.stored)
				requireDecoder(t, local)
				ref := lib.reference(t, img)
				t.Run("http-stream", func(t *testing.T) {
					importNoScratch(t, importer.Options{Source: streamURL + "/" + servedName(img.stored)}, ref)
				})
				t.Run("stdin-xz", func(t *testing.T) {
					// The stored .xz through a pipe: decompressed and
					// decoded in the same pass.
					importNoScratch(t, importer.Options{Source: "-", SourceReader: pipeOf(t, lib.storedPath(img.stored))}, ref)
				})
			})
		}
	})
	t.Run("generated", func(t *testing.T) {
		dir := t.TempDir()
		www := filepath.Join(dir, "www")
		require.NoError(t, os.MkdirAll(www, 0o755))
		streamURL := serve(t, streamOnlyHandler(www))
		for _, g := range generatedStreamImages(t, dir, www) {
			t.Run(g.name, func(t *testing.T) {
				requireDecoder(t, filepath.Join(www, g.name))
				size, digest, err := contentDigest(g.want, -1)
				require.NoError(t, err)
				ref := reference{path: g.want, size: size, digest: digest}
				t.Run("http-stream", func(t *testing.T) {
					importNoScratch(t, importer.Options{Source: streamURL + "/" + g.name}, ref)
				})
				t.Run("stdin", func(t *testing.T) {
					importNoScratch(t, importer.Options{Source: "-", SourceReader: pipeOf(t, filepath.Join(www, g.name))}, ref)
				})
			})
		}
	})
}

// requireDecoder fails for an image streamdecode has no decoder for: each
// row of this test is one the stream-decode route must take.
func requireDecoder(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := format.Open(context.Background(), f, format.Options{})
	require.NoError(t, err)
	defer img.Close()
	require.True(t, streamdecode.Supports(img), "internal/streamdecode has no stream decoder for this %s image", img.Format)
}

// importNoScratch imports o onto a file with a scratch directory set and
// checks that the decoder took it, wrote no scratch, and wrote ref's bytes.
func importNoScratch(t *testing.T, o importer.Options, ref reference) {
	t.Helper()
	dir := t.TempDir()
	if ref.size > freeSpace(t, dir) {
		// A 127 GiB virtual disk: a tmpfs that large holds it, as only
		// its data takes memory.
		dir = testimg.Tmpfs(t, ref.size+1<<30)
	}
	o.Target = filepath.Join(dir, "disk.img")
	o.ScratchDir = t.TempDir()
	o.Logger = testimg.Logger(t)
	res, err := importer.Import(context.Background(), o)
	require.NoError(t, err)
	assert.True(t, res.Complete)
	assert.Equal(t, streamDecodePhases, res.Phases, "the stream decoder's route")
	assert.False(t, res.ScratchUsed, "scratch used")
	assert.Zero(t, res.ScratchBytes, "scratch bytes")
	assertEmptyDir(t, o.ScratchDir)
	assert.Equal(t, ref.size, res.VirtualSize)
	size, digest, err := contentDigest(o.Target, ref.size)
	require.NoError(t, err)
	assert.Equal(t, ref.size, size)
	assert.Equal(t, ref.digest, digest, "target differs from qemu-img convert -O raw")
}

type generatedImage struct {
	name string // below www
	want string // qemu-img convert -O raw of it
}

// generatedStreamImages makes the layouts the corpus lacks, in www.
func generatedStreamImages(t *testing.T, dir, www string) []generatedImage {
	t.Helper()
	raw := testimg.Raw(t, dir, "gen.raw", 24<<20+64<<10, 61)
	var out []generatedImage
	add := func(path, qfmt string) {
		want := qemuRaw(t, path, qfmt)
		rel, err := filepath.Rel(www, path)
		require.NoError(t, err)
		out = append(out, generatedImage{name: rel, want: want})
	}
	conv := func(name, qfmt string, args ...string) string {
		p := filepath.Join(www, name)
		testimg.Run(t, "qemu-img", append(append([]string{"convert", "-q", "-f", "raw", "-O", qfmt}, args...), raw, p)...)
		return p
	}
	add(conv("plain.qcow2", "qcow2"), "qcow2")
	add(conv("zlib.qcow2", "qcow2", "-c"), "qcow2")
	add(conv("zstd-16k.qcow2", "qcow2", "-c", "-o", "compression_type=zstd,cluster_size=16384"), "qcow2")
	add(conv("extl2-2m.qcow2", "qcow2", "-o", "extended_l2=on,cluster_size=2M"), "qcow2")
	add(conv("v2.qcow2", "qcow2", "-o", "compat=0.10"), "qcow2")
	add(conv("prealloc.qcow2", "qcow2", "-o", "preallocation=metadata"), "qcow2")
	// Internal snapshots, with writes before and after them: the active
	// layer's L2 tables then come after most of its data.
	snap := conv("snapshots.qcow2", "qcow2")
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x51 2M 256k", snap)
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s1", snap)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x52 5M 64k", "-c", "write -z 9M 1M", snap)
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s2", snap)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x53 20M 128k", snap)
	add(snap, "qcow2")
	// The same layout without its snapshots.
	late := conv("late.qcow2", "qcow2")
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s1", late)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x54 1M 64k", late)
	testimg.Run(t, "qemu-img", "snapshot", "-d", "s1", late)
	add(late, "qcow2")
	gz := testimg.Compress(t, snap, "gz")
	out = append(out, generatedImage{name: filepath.Base(gz), want: out[len(out)-2].want})
	add(conv("stream.vmdk", "vmdk", "-o", "subformat=streamOptimized"), "vmdk")
	add(conv("dynamic.vhd", "vpc"), "vpc")
	add(conv("dynamic.vdi", "vdi"), "vdi")
	add(conv("static.vdi", "vdi", "-o", "static=on"), "vdi")
	add(conv("dynamic.vhdx", "vhdx"), "vhdx")
	add(conv("fixed.vhdx", "vhdx", "-o", "subformat=fixed"), "vhdx")
	return out
}
