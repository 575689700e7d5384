package importer_test

// Issue 14's "no scratch for streamed images": every qcow2, streamOptimized
// vmdk, dynamic vhd, vdi and vhdx of the real-image corpus (and a set of
// generated layouts: compressed clusters, tables after their data,
// internal snapshots) imported as a stream — over HTTP without byte
// ranges and through a pipe as stdin or an upload would be — with a
// scratch directory set, writes no byte of scratch: ScratchUsed is false,
// the directory stays empty, and the target is `qemu-img convert -O raw`
// of the image byte for byte.

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/streamdecode"
	"github.com/diskimport/engine/internal/testimg"
)

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
