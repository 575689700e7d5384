package delta_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testimg"
)

// TestManifestRefusesEntriesOutOfTheVolume: a manifest naming a path out
// of the volume (absolute, "..", unclean, the staging directory), an
// entry before its directory or twice, or a symlink that points out of
// the volume is refused as unsafe before anything is opened.
func TestManifestRefusesEntriesOutOfTheVolume(t *testing.T) {
	file := func(p string) delta.Entry { return delta.Entry{Path: p, Kind: delta.KindFile, Mode: 0o644, Size: 1} }
	dir := func(p string) delta.Entry { return delta.Entry{Path: p, Kind: delta.KindDir, Mode: 0o755} }
	link := func(p, to string) delta.Entry { return delta.Entry{Path: p, Kind: delta.KindSymlink, Link: to} }
	for name, entries := range map[string][]delta.Entry{
		"absolute":            {file("/etc/passwd")},
		"dot-dot":             {file("../disk.img")},
		"dot-dot inside":      {dir("a"), file("a/../../disk.img")},
		"unclean":             {dir("a"), file("a//disk.img")},
		"staging":             {file(delta.StagingPrefix + "x")},
		"before its dir":      {file("a/disk.img"), dir("a")},
		"under a file":        {file("a"), file("a/disk.img")},
		"twice":               {file("disk.img"), file("disk.img")},
		"absolute link":       {link("l", "/etc")},
		"link climbing out":   {dir("a"), link("a/l", "../../etc")},
		"unknown kind":        {{Path: "dev", Kind: "device"}},
		"size of a directory": {{Path: "d", Kind: delta.KindDir, Size: 5}},
	} {
		t.Run(name, func(t *testing.T) {
			m := &delta.Manifest{Entries: entries}
			var buf bytes.Buffer
			_, err := m.WriteTo(&buf)
			require.NoError(t, err)
			_, err = delta.ReadManifest(&buf)
			assert.ErrorIs(t, err, errdefs.ErrUnsafeImage)
		})
	}
	ok := &delta.Manifest{Entries: []delta.Entry{dir("a"), file("a/disk.img"), link("a/l", "disk.img"), link("up", "a/../a/disk.img")}}
	var buf bytes.Buffer
	_, err := ok.WriteTo(&buf)
	require.NoError(t, err)
	_, err = delta.ReadManifest(&buf)
	assert.NoError(t, err)
}

// TestTreePassDoesNotWriteThroughASymlinkedDirectory: the target's
// directory holding the large file is a symlink to a directory outside
// the volume, whose file has the right size: it is not compared in place
// (nothing outside is read for writing, nor written); the pass replaces
// the link with a directory and the file is sent whole; the volume's
// digest after it is the source's.
func TestTreePassDoesNotWriteThroughASymlinkedDirectory(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(src, "vm"), 0o755))
	testimg.Raw(t, filepath.Join(src, "vm"), "disk.img", 8<<20, 81)
	outside := t.TempDir()
	testimg.CopyOnto(t, filepath.Join(src, "vm", "disk.img"), filepath.Join(outside, "disk.img"))
	testimg.WriteRandomAt(t, filepath.Join(src, "vm", "disk.img"), 82, 4096, 3<<20)
	before := testimg.FileDigest(t, filepath.Join(outside, "disk.img"))
	dst := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(dst, "vm")))

	s, err := delta.OpenTreeSource(ctx, src)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Sign(ctx))
	tt, err := delta.OpenTree(ctx, dst, s.Manifest(), "")
	require.NoError(t, err)
	defer tt.Close()
	files, _ := tt.Signed()
	assert.Empty(t, files, "nothing compared in place through the symlink")
	st := s.Plan(nil, nil)
	assert.Positive(t, st.DataBytes)
	require.NoError(t, s.Send(ctx, 0, tt))
	got, err := tt.Finish(s.Digest())
	require.NoError(t, err)
	assert.Equal(t, s.Digest(), got)

	assert.Equal(t, before, testimg.FileDigest(t, filepath.Join(outside, "disk.img")), "the directory outside is untouched")
	fi, err := os.Lstat(filepath.Join(dst, "vm"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "the link became a directory")
	assert.Equal(t, testimg.FileDigest(t, filepath.Join(src, "vm", "disk.img")), testimg.FileDigest(t, filepath.Join(dst, "vm", "disk.img")))
	entries, err := os.ReadDir(dst)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), delta.StagingPrefix), "the staging directory is gone")
	}
}

// TestTreePassRefusesADigestThatIsNotTheSource: runs that do not make
// the volume the source's (here: one block left out) fail the pass
// before anything is put in place: the small file staged whole is not
// renamed in, the target's old one stays.
func TestTreePassRefusesADigestThatIsNotTheSource(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "small"), []byte("new contents"), 0o644))
	testimg.Raw(t, src, "disk.img", 8<<20, 83)
	dst := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dst, "small"), []byte("old"), 0o644))

	s, err := delta.OpenTreeSource(ctx, src)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Sign(ctx))
	tt, err := delta.OpenTree(ctx, dst, s.Manifest(), "")
	require.NoError(t, err)
	defer tt.Close()
	s.Plan(nil, nil)
	require.NoError(t, s.Send(ctx, 0, &dropFirstData{sink: tt}))
	_, err = tt.Finish(s.Digest())
	assert.ErrorIs(t, err, errdefs.ErrVerifyMismatch)
	old, err := os.ReadFile(filepath.Join(dst, "small"))
	require.NoError(t, err)
	assert.Equal(t, "old", string(old))
	_, err = os.Stat(filepath.Join(dst, "disk.img"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a file sent whole is renamed in only after the digest matched")
}

// dropFirstData passes every run but the first data run on.
type dropFirstData struct {
	sink    delta.Sink
	dropped bool
}

func (d *dropFirstData) Data(off int64, p []byte) error {
	if !d.dropped {
		d.dropped = true
		return nil
	}
	return d.sink.Data(off, p)
}

func (d *dropFirstData) Zero(off, n int64) error { return d.sink.Zero(off, n) }

// TestTreePassRefusesFilesLargerThanTheFilesystem: a manifest whose
// files could not fit in the target's filesystem (a petabyte file) is
// refused before anything is made or any signature held.
func TestTreePassRefusesFilesLargerThanTheFilesystem(t *testing.T) {
	dst := t.TempDir()
	m := &delta.Manifest{Entries: []delta.Entry{{Path: "disk.img", Kind: delta.KindFile, Mode: 0o644, Size: 1 << 50}}}
	_, err := delta.OpenTree(context.Background(), dst, m, "")
	assert.ErrorIs(t, err, errdefs.ErrTargetTooSmall)
	entries, err := os.ReadDir(dst)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// TestTreePassRefusesFileSizesWhoseSumWraps: a manifest whose file sizes
// sum past math.MaxInt64 (four files of 2^62 bytes summed to 0; one of
// MaxInt64 bytes rounded up to a block wraps alone) is refused as invalid
// when read and when opened, on a tmpfs (which, like xfs and btrfs, takes
// files of 2^62 bytes), and nothing is left in the volume. Before the
// sums were checked, the layout of 0 bytes passed the capacity check, the
// staged files were made and ZeroSignature(2^62) panicked.
func TestTreePassRefusesFileSizesWhoseSumWraps(t *testing.T) {
	file := func(p string, size int64) delta.Entry {
		return delta.Entry{Path: p, Kind: delta.KindFile, Mode: 0o644, Size: size}
	}
	dst := testimg.Tmpfs(t, 64<<20)
	for name, entries := range map[string][]delta.Entry{
		"four of 2^62":            {file("a", 1<<62), file("b", 1<<62), file("c", 1<<62), file("d", 1<<62)},
		"one of MaxInt64":         {file("a", math.MaxInt64)},
		"one past the last block": {file("a", math.MaxInt64-delta.BlockSize+2)},
		"a byte after the last":   {file("a", math.MaxInt64/delta.BlockSize*delta.BlockSize), file("b", 1)},
	} {
		t.Run(name, func(t *testing.T) {
			m := &delta.Manifest{Entries: entries}
			_, err := m.LayOut()
			assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
			var wire bytes.Buffer
			_, err = m.WriteTo(&wire)
			require.NoError(t, err)
			_, err = delta.ReadManifest(&wire)
			assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
			_, err = delta.OpenTree(context.Background(), dst, m, "")
			assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
			_, err = delta.ReceiveTree(dst, m, "")
			assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
			assert.Empty(t, testimg.DirNames(t, dst))
		})
	}
	// The largest layout there is still lays out.
	l, err := (&delta.Manifest{Entries: []delta.Entry{file("a", math.MaxInt64/delta.BlockSize*delta.BlockSize)}}).LayOut()
	require.NoError(t, err)
	assert.Equal(t, int64(math.MaxInt64/delta.BlockSize*delta.BlockSize), l.Size)
}
