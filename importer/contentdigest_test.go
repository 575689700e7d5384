package importer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/testkit/regtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// containers makes one disk in every container the engine reads, each
// with qemu-img, and returns name → path.
func containers(t *testing.T, dir, raw string) map[string]string {
	t.Helper()
	testimg.Need(t, "qemu-img", "xz", "gzip")
	c := map[string]string{"raw": raw}
	conv := func(name, f string, opts ...string) string {
		return testimg.Convert(t, raw, filepath.Join(dir, name), f, opts...)
	}
	c["qcow2"] = conv("disk.qcow2", "qcow2")
	c["qcow2.xz"] = testimg.Compress(t, c["qcow2"], "xz")
	c["raw.gz"] = testimg.Compress(t, raw, "gz")
	c["vmdk-stream.gz"] = testimg.Compress(t, conv("stream.vmdk", "vmdk", "subformat=streamOptimized"), "gz")
	c["vmdk"] = conv("disk.vmdk", "vmdk")
	c["vhd"] = conv("disk.vhd", "vpc", "subformat=dynamic", "force_size=on")
	c["vhd.gz"] = testimg.Compress(t, c["vhd"], "gz")
	c["vhd-fixed"] = conv("fixed.vhd", "vpc", "subformat=fixed", "force_size=on") // raw and a footer, left out
	c["vhd-fixed.xz"] = testimg.Compress(t, c["vhd-fixed"], "xz")
	c["vdi"] = conv("disk.vdi", "vdi")
	c["vdi.gz"] = testimg.Compress(t, c["vdi"], "gz")
	c["vhdx"] = conv("disk.vhdx", "vhdx")
	c["vhdx.gz"] = testimg.Compress(t, c["vhdx"], "gz")
	return c
}

func TestContentDigestIsTheSameForOneDiskInEveryContainerAndRoute(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 77)
	want := testimg.ContentDigest(t, raw)
	base := testimg.Serve(t, dir)
	forEachFileAndURL(t, containers(t, dir, raw), base, func(t *testing.T, path, src string) {
		res, err := importer.Import(context.Background(), importer.Options{Source: src,
			Target: filepath.Join(t.TempDir(), "disk.img"), TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
			}, Logger: testimg.Logger(t)})
		require.NoError(t, err)
		assert.Equal(t, want, res.ContentDigest, "route %v", res.Phases)
		assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, res.Target, imageSize), "the bytes written")
	})
}

func TestContentDigestOfAnImportOntoALoopDevice(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 78)
	want := testimg.ContentDigest(t, raw)
	dev := testimg.LoopDevice(t, dir, imageSize)
	c := containers(t, dir, raw)
	for _, name := range []string{"raw", "qcow2", "qcow2.xz", "vhdx.gz"} {
		t.Run(name, func(t *testing.T) {
			res, err := importer.Import(context.Background(), importer.Options{Source: c[name], Target: dev,
				TargetOptions: importer.TargetOptions{
					ScratchDir:          t.TempDir(),
					ExpectContentDigest: want,
				}, Logger: testimg.Logger(t)})
			require.NoError(t, err)
			assert.Equal(t, want, res.ContentDigest, "route %v", res.Phases)
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dev, imageSize))
		})
	}
}

func TestExpectContentDigestMismatchFailsAndLeavesNoTarget(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 79)
	c := containers(t, dir, raw)
	wrong := strings.Repeat("ab", blkhash.Size) // blksum's spelling: hex alone
	for _, name := range []string{"raw", "qcow2", "qcow2.xz"} {
		testimg.ForEachTarget(t, name, imageSize, func(t *testing.T, tg testimg.Target) {
			target := tg.Path
			res, err := importer.Import(context.Background(), importer.Options{Source: c[name], Target: target,
				TargetOptions: importer.TargetOptions{
					ScratchDir:          t.TempDir(),
					ExpectContentDigest: wrong,
				}, Logger: testimg.Logger(t)})
			require.ErrorIs(t, err, errdefs.ErrChecksumMismatch)
			assert.False(t, res.Complete)
			assert.Equal(t, testimg.ContentDigest(t, raw), res.ContentDigest, "the digest found is reported")
			if !tg.Block {
				_, statErr := os.Stat(target)
				assert.ErrorIs(t, statErr, os.ErrNotExist, "no target file is left")
				entries, _ := os.ReadDir(filepath.Dir(target))
				assert.Empty(t, entries, "no temporary file is left")
				return
			}
			// Whatever the route, the image's first MiB is not on the
			// device: never written (streamed) or wiped (converted).
			assert.NotEqual(t, testimg.Digest(t, raw, 1<<20), testimg.Digest(t, target, 1<<20), "the device does not hold the image's head")
		})
	}
}

func TestExpectContentDigestIsCheckedBeforeAnything(t *testing.T) {
	_, err := importer.Import(context.Background(), importer.Options{Source: "x.raw", Target: filepath.Join(t.TempDir(), "d"),
		TargetOptions: importer.TargetOptions{
			ExpectContentDigest: "sha256:00",
		}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

func TestContentDigestOfEverySourceKindWithoutWritingAnything(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 80)
	want := testimg.ContentDigest(t, raw)
	c := containers(t, dir, raw)
	base := testimg.Serve(t, dir)
	forEachFileAndURL(t, c, base, func(t *testing.T, _, src string) {
		scratch := t.TempDir()
		got, err := importer.ContentDigest(context.Background(), importer.Options{Source: src, TargetOptions: importer.TargetOptions{ScratchDir: scratch}, Logger: testimg.Logger(t)})
		require.NoError(t, err)
		assert.Equal(t, want, got)
		entries, _ := os.ReadDir(scratch)
		assert.Empty(t, entries, "nothing is left in the scratch directory")
	})
	t.Run("stdin", func(t *testing.T) {
		f, err := os.Open(c["qcow2.xz"])
		require.NoError(t, err)
		defer f.Close()
		got, err := importer.ContentDigest(context.Background(), importer.Options{Source: "-", SourceReader: f, Logger: testimg.Logger(t)})
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})
	t.Run("loop device", func(t *testing.T) {
		dev := testimg.LoopDevice(t, dir, imageSize)
		testimg.WriteDevice(t, dev, raw)
		got, err := importer.ContentDigest(context.Background(), importer.Options{Source: dev, Logger: testimg.Logger(t)})
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})
	t.Run("registry containerdisk", func(t *testing.T) {
		reg := regtest.Start(t, regtest.Options{})
		for i, name := range []string{"raw", "qcow2", "qcow2.xz"} {
			ref := reg.Push(t, fmt.Sprintf("cd/digest%d:v1", i), regtest.Image(t, regtest.Config{}, diskLayer(t, regtest.Gzip, "disk."+name, c[name])), nil)
			got, err := importer.ContentDigest(context.Background(), regOpts(t, "docker://"+ref, ""))
			require.NoError(t, err, name)
			assert.Equal(t, want, got, name)
		}
	})
}

// On standard input the digest does what an import does: a sparse vmdk
// (which the decoder does not read) is imported through scratch and
// hashed, and a qcow2 whose clusters come before their tables spills to
// the scratch directory, by default the system's temporary directory;
// nothing is left there.
func TestContentDigestOfStdinDoesWhatAnImportDoes(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 81)
	want := testimg.ContentDigest(t, raw)
	c := containers(t, dir, raw)
	late, lateRaw := lateTablesQCOW2(t, dir)
	for _, cs := range []struct{ name, path, want string }{
		{"monolithicSparse vmdk", c["vmdk"], want},
		{"monolithicSparse vmdk, gzip", testimg.Compress(t, c["vmdk"], "gz"), want},
		{"qcow2 of late tables, gzip", late, testimg.ContentDigest(t, lateRaw)},
	} {
		t.Run(cs.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			var logs bytes.Buffer
			o := importer.Options{Source: "-", SourceReader: pipeOf(t, cs.path), Logger: logTo(t, &logs)}
			got, err := importer.ContentDigest(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
			require.NoError(t, err)
			assert.Equal(t, cs.want, got)
			assertEmptyDir(t, tmp)
			if strings.HasPrefix(cs.name, "qcow2") {
				assert.Contains(t, logs.String(), "spilled to the scratch directory\" dir="+tmp)
			}
		})
	}
}

func TestContentDigestOfADamagedImageFails(t *testing.T) {
	dir := t.TempDir()
	_, q := testimg.RawAndQCOW2(t, dir, imageSize, 81)
	b, err := os.ReadFile(q)
	require.NoError(t, err)
	cut := filepath.Join(dir, "cut.qcow2.gz")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cut.qcow2"), b[:len(b)/2], 0o644))
	testimg.Compress(t, filepath.Join(dir, "cut.qcow2"), "gz")
	_, err = importer.ContentDigest(context.Background(), importer.Options{Source: cut, Logger: testimg.Logger(t)})
	assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
}
