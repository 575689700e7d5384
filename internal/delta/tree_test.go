package delta_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
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
			_, err = delta.ReceiveTree(dst, m, "", nil)
			assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
			assert.Empty(t, testimg.DirNames(t, dst))
		})
	}
	// The largest layout there is still lays out.
	l, err := (&delta.Manifest{Entries: []delta.Entry{file("a", math.MaxInt64/delta.BlockSize*delta.BlockSize)}}).LayOut()
	require.NoError(t, err)
	assert.Equal(t, int64(math.MaxInt64/delta.BlockSize*delta.BlockSize), l.Size)
}

// TestTreePassOfMoreFilesThanTheOpenFileLimit: a volume of more files
// than the process may hold open takes a pass (neither side keeps every
// file open). The pass runs in a child, this test binary again, whose
// RLIMIT_NOFILE is 64: 300 small files sent whole or kept, and 80 sparse
// files of 2 MiB + 64 KiB compared in place; afterwards every file of the
// target holds the source's bytes.
func TestTreePassOfMoreFilesThanTheOpenFileLimit(t *testing.T) {
	const child = "DELTA_TREE_NOFILE_CHILD"
	if dirs := os.Getenv(child); dirs != "" {
		src, dst, _ := strings.Cut(dirs, string(os.PathListSeparator))
		treePassUnderAFileLimit(t, src, dst, 64)
		return
	}
	src, dst := t.TempDir(), t.TempDir()
	var names []string
	for i := range 300 {
		name := fmt.Sprintf("small-%03d", i)
		data := testimg.RandomBytes(1000+i*7, uint64(i))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), data, 0o644))
		switch i % 3 {
		case 0: // the same: kept
			require.NoError(t, os.WriteFile(filepath.Join(dst, name), data, 0o644))
		case 1: // another content
			require.NoError(t, os.WriteFile(filepath.Join(dst, name), data[:len(data)/2], 0o644))
		}
		names = append(names, name)
	}
	for i := range 80 {
		name := fmt.Sprintf("large-%02d.img", i)
		for _, d := range []string{src, dst} {
			f, err := os.Create(filepath.Join(d, name))
			require.NoError(t, err)
			require.NoError(t, f.Truncate(2<<20+64<<10))
			require.NoError(t, f.Close())
		}
		testimg.WriteRandomAt(t, filepath.Join(src, name), uint64(1000+i), 4096, int64(i%33)<<16)
		names = append(names, name)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTreePassOfMoreFilesThanTheOpenFileLimit$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), child+"="+src+string(os.PathListSeparator)+dst)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the pass under a limit of 64 open files:\n%s", out)
	t.Logf("%s", out)
	for _, name := range names {
		require.Equal(t, testimg.FileDigest(t, filepath.Join(src, name)), testimg.FileDigest(t, filepath.Join(dst, name)), name)
	}
}

// treePassUnderAFileLimit lowers this process's open-file limit to n and
// runs a pass of the volume src onto dst, as the cloner and the upload
// server do.
func treePassUnderAFileLimit(t *testing.T, src, dst string, n uint64) {
	ctx := context.Background()
	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	lim.Cur = n
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))

	s, err := delta.OpenTreeSource(ctx, src)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.SignSmall(ctx))
	require.NoError(t, s.Sign(ctx))
	tt, err := delta.OpenTree(ctx, dst, s.Manifest(), "")
	require.NoError(t, err)
	defer tt.Close()
	files, sigs := tt.Signed()
	assert.Len(t, files, 80, "the large files compared in place")
	bases := map[int]*delta.Signature{}
	for i, k := range files {
		bases[k] = sigs[i]
	}
	assert.Len(t, tt.Kept(), 100, "the small files the target holds")
	st := s.Plan(bases, tt.Kept())
	t.Logf("pass: %+v", st)
	assert.EqualValues(t, 80*(2<<20+64<<10), st.Size-smallBytes(300), "layout")
	assert.EqualValues(t, 80, st.BlocksChanged-200, "one block of each large file, each small file not kept")
	require.NoError(t, s.Send(ctx, 0, tt))
	got, err := tt.Finish(s.Digest())
	require.NoError(t, err)
	assert.Equal(t, s.Digest(), got)
	final, err := s.Final(ctx)
	require.NoError(t, err)
	assert.True(t, final)
}

// smallBytes is what the first n small files of the test hold.
func smallBytes(n int) int64 {
	var b int64
	for i := range n {
		b += int64(1000 + i*7)
	}
	return b
}

// TestTreePassRefusesADirectoryThatIsNoVolume: a pass lays its directory
// out as the manifest says, removing what it does not list, so a
// directory no volume looks like (it holds a device node, a fifo or a
// socket, or another file system is mounted below it: /dev, taken once
// for the volume of a device's node) is refused as no base before
// anything in it is read or removed.
func TestTreePassRefusesADirectoryThatIsNoVolume(t *testing.T) {
	m := &delta.Manifest{Entries: []delta.Entry{{Path: "disk.img", Kind: delta.KindFile, Mode: 0o644, Size: 1 << 20}}}
	cases := map[string]func(t *testing.T, dir string){
		"a device node": func(t *testing.T, dir string) {
			require.NoError(t, unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		},
		"a fifo": func(t *testing.T, dir string) {
			require.NoError(t, unix.Mkfifo(filepath.Join(dir, "sub", "pipe"), 0o600))
		},
		"a mount below": func(t *testing.T, dir string) {
			testimg.Need(t, "mount")
			mnt := filepath.Join(dir, "sub")
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
				t.Skipf("mount tmpfs: %v %s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
		},
	}
	for name, make := range cases {
		t.Run(name, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("device nodes and mounts need root")
			}
			dir := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("kept"), 0o600))
			make(t, dir)
			_, err := delta.OpenTree(context.Background(), dir, m, "")
			require.Error(t, err)
			t.Logf("%v", err)
			assert.ErrorIs(t, err, errdefs.ErrNoDeltaBase)
			b, err := os.ReadFile(filepath.Join(dir, "keep.txt"))
			require.NoError(t, err)
			assert.Equal(t, "kept", string(b))
		})
	}
}
