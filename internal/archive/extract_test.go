package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/archive"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testtar"
)

// SampleTree is the archive the tests extract: every supported member
// type, varied modes and times, a sparse-looking file, implicit parents.
func sampleTree() []testtar.Member {
	t0 := time.Date(2020, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	sparse := append(append(testimg.RandomBytes(5000, 1), make([]byte, 3<<20)...), []byte("tail after a hole")...)
	return []testtar.Member{
		{Name: "./", Type: tar.TypeDir, Mode: 0o755, MTime: t0},
		{Name: "dir/", Type: tar.TypeDir, Mode: 0o750, MTime: t0.Add(time.Hour), UID: 1234, GID: 2345},
		{Name: "dir/sub/", Type: tar.TypeDir, Mode: 0o555, MTime: t0.Add(2 * time.Hour)},
		{Name: "dir/sub/data.bin", Type: tar.TypeReg, Body: testimg.RandomBytes(200_000, 2), Mode: 0o600, MTime: t0.Add(3 * time.Hour), UID: 1234, GID: 2345},
		{Name: "dir/exec.sh", Type: tar.TypeReg, Body: []byte("#!/bin/sh\necho hi\n"), Mode: 0o755, MTime: t0.Add(4 * time.Hour)},
		{Name: "top.txt", Type: tar.TypeReg, Body: []byte("first version\n"), Mode: 0o644},
		{Name: "top.txt", Type: tar.TypeReg, Body: []byte("second version wins\n"), Mode: 0o640, MTime: t0.Add(5 * time.Hour)},
		{Name: "empty", Type: tar.TypeReg, Mode: 0o444, MTime: t0},
		{Name: "sparse.img", Type: tar.TypeReg, Body: sparse, Mode: 0o644, MTime: t0},
		{Name: "implicit/a/b.txt", Type: tar.TypeReg, Body: []byte("parents not listed\n"), Mode: 0o644, MTime: t0},
		{Name: "link-to-data", Type: tar.TypeSymlink, Link: "dir/sub/data.bin", MTime: t0.Add(6 * time.Hour)},
		{Name: "dir/up", Type: tar.TypeSymlink, Link: "../top.txt", MTime: t0},
		{Name: "dangling", Type: tar.TypeSymlink, Link: "does/not/exist", MTime: t0},
		{Name: "dir/hard.sh", Type: tar.TypeLink, Link: "dir/exec.sh"},
		{Name: "./hard-top", Type: tar.TypeLink, Link: "./top.txt"},
	}
}

// checkSampleTree verifies dest holds sampleTree exactly.
func checkSampleTree(t *testing.T, dest string) {
	t.Helper()
	want := map[string]testtar.Member{}
	for _, m := range sampleTree() {
		name := filepath.Clean(m.Name)
		if name == "." {
			continue
		}
		want[name] = m
	}
	got := snapshot(t, dest, "")
	delete(got, ".")
	for _, implicit := range []string{"implicit", "implicit/a"} {
		n, ok := got[implicit]
		if assert.True(t, ok, implicit) {
			assert.True(t, n.Mode.IsDir(), implicit)
		}
		delete(got, implicit)
	}
	assert.ElementsMatch(t, sortedKeys(got), func() []string {
		var ks []string
		for k := range want {
			ks = append(ks, k)
		}
		return ks
	}())
	for name, m := range want {
		p := filepath.Join(dest, name)
		st, err := os.Lstat(p)
		require.NoError(t, err, name)
		switch m.Type {
		case tar.TypeReg:
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(m.Body, b), "content of %s", name)
			assert.Equal(t, os.FileMode(m.Mode), st.Mode().Perm(), "mode of %s", name)
			assert.True(t, m.MTime.Equal(st.ModTime()), "mtime of %s: %v, want %v", name, st.ModTime(), m.MTime)
		case tar.TypeDir:
			assert.True(t, st.IsDir(), name)
			assert.Equal(t, os.FileMode(m.Mode), st.Mode().Perm(), "mode of %s", name)
			assert.True(t, m.MTime.Equal(st.ModTime()), "mtime of %s: %v, want %v", name, st.ModTime(), m.MTime)
		case tar.TypeSymlink:
			target, err := os.Readlink(p)
			require.NoError(t, err)
			assert.Equal(t, m.Link, target, name)
			assert.True(t, m.MTime.Equal(st.ModTime()), "mtime of symlink %s", name)
		case tar.TypeLink:
			other, err := os.Lstat(filepath.Join(dest, filepath.Clean(m.Link)))
			require.NoError(t, err)
			assert.True(t, os.SameFile(st, other), "%s is a hard link to %s", name, m.Link)
		}
		if os.Geteuid() == 0 && m.Type != tar.TypeLink {
			sys := st.Sys().(*syscall.Stat_t)
			assert.Equal(t, uint32(m.UID), sys.Uid, "uid of %s", name)
			assert.Equal(t, uint32(m.GID), sys.Gid, "gid of %s", name)
		}
	}
}

func TestExtractTree(t *testing.T) {
	base, dest := sandbox(t)
	before := snapshot(t, base, dest)
	data := testtar.Build(t, sampleTree())
	stats, err := archive.Extract(context.Background(), bytes.NewReader(data), dest, archive.Options{})
	require.NoError(t, err)
	checkSampleTree(t, dest)
	assert.Equal(t, 7, stats.Files) // top.txt counted twice: both were written
	assert.Equal(t, 2, stats.Dirs)
	assert.Equal(t, 3, stats.Symlinks)
	assert.Equal(t, 2, stats.HardLinks)
	assert.Equal(t, before, snapshot(t, base, dest), "nothing outside dest changed")

	// The zero run in the middle of sparse.img became a hole.
	st, err := os.Stat(filepath.Join(dest, "sparse.img"))
	require.NoError(t, err)
	blocks := st.Sys().(*syscall.Stat_t).Blocks * 512
	assert.Less(t, blocks, st.Size()-(2<<20), "sparse.img allocates %d of %d bytes", blocks, st.Size())
}

func TestExtractEmptyAndDamaged(t *testing.T) {
	_, dest := sandbox(t)
	empty := testtar.Build(t, nil)
	stats, err := archive.Extract(context.Background(), bytes.NewReader(empty), dest, archive.Options{})
	require.NoError(t, err)
	assert.Equal(t, archive.Stats{}, stats)

	data := testtar.Build(t, []testtar.Member{{Name: "big", Type: tar.TypeReg, Body: testimg.RandomBytes(100_000, 3)}})
	_, err = archive.Extract(context.Background(), bytes.NewReader(data[:50_000]), dest, archive.Options{})
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)

	garbage := testimg.RandomBytes(4096, 4)
	_, err = archive.Extract(context.Background(), bytes.NewReader(garbage), t.TempDir(), archive.Options{})
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
}

func TestExtractCancelled(t *testing.T) {
	_, dest := sandbox(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	data := testtar.Build(t, []testtar.Member{{Name: "f", Type: tar.TypeReg, Body: []byte("x")}})
	_, err := archive.Extract(ctx, bytes.NewReader(data), dest, archive.Options{})
	require.ErrorIs(t, err, errdefs.ErrCancelled)
}

// TestExtractHostile feeds archives that try to reach outside the
// destination; each must fail as unsafe and leave everything outside
// untouched.
func TestExtractHostile(t *testing.T) {
	cases := []struct {
		name        string
		members     func(base string) []testtar.Member
		allowLinks  bool
		wantInvalid bool
	}{
		{name: "dotdot", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "../x", Type: tar.TypeReg, Body: []byte("escaped")}}
		}},
		{name: "dotdot-overwrite", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "a/../../sentinel/keep", Type: tar.TypeReg, Body: []byte("overwritten")}}
		}},
		{name: "absolute", members: func(base string) []testtar.Member {
			return []testtar.Member{{Name: filepath.Join(base, "sentinel", "abs"), Type: tar.TypeReg, Body: []byte("escaped")}}
		}},
		{name: "etc", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "/etc/importer-archive-test-x", Type: tar.TypeReg, Body: []byte("escaped")}}
		}},
		{name: "symlink-to-root", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "s", Type: tar.TypeSymlink, Link: "/"}}
		}},
		{name: "symlink-dotdot", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "d/s", Type: tar.TypeSymlink, Link: "../../sentinel"}}
		}},
		{name: "write-through-symlink-to-root", allowLinks: true, members: func(base string) []testtar.Member {
			return []testtar.Member{
				{Name: "s", Type: tar.TypeSymlink, Link: "/"},
				{Name: "s" + filepath.Join(base, "sentinel", "new"), Type: tar.TypeReg, Body: []byte("escaped")},
			}
		}},
		{name: "write-through-symlink-outside", allowLinks: true, members: func(base string) []testtar.Member {
			return []testtar.Member{
				{Name: "s", Type: tar.TypeSymlink, Link: filepath.Join(base, "sentinel")},
				{Name: "s/keep", Type: tar.TypeReg, Body: []byte("overwritten")},
			}
		}},
		{name: "mkdir-through-symlink", allowLinks: true, members: func(base string) []testtar.Member {
			return []testtar.Member{
				{Name: "s", Type: tar.TypeSymlink, Link: "../sentinel"},
				{Name: "s/newdir/", Type: tar.TypeDir, Mode: 0o777},
			}
		}},
		{name: "write-through-inner-symlink", members: func(string) []testtar.Member {
			// Even a link that stays inside is never followed by a later member.
			return []testtar.Member{
				{Name: "d/", Type: tar.TypeDir},
				{Name: "l", Type: tar.TypeSymlink, Link: "d"},
				{Name: "l/x", Type: tar.TypeReg, Body: []byte("x")},
			}
		}},
		{name: "hardlink-etc-passwd", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "h", Type: tar.TypeLink, Link: "/etc/passwd"}}
		}},
		{name: "hardlink-dotdot", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "h", Type: tar.TypeLink, Link: "../sentinel/keep"}}
		}},
		{name: "hardlink-through-symlink", allowLinks: true, members: func(base string) []testtar.Member {
			return []testtar.Member{
				{Name: "s", Type: tar.TypeSymlink, Link: filepath.Join(base, "sentinel")},
				{Name: "h", Type: tar.TypeLink, Link: "s/keep"},
				{Name: "h", Type: tar.TypeReg, Body: []byte("overwritten")},
			}
		}},
		{name: "char-device", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "null", Type: tar.TypeChar}}
		}},
		{name: "block-device", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "sda", Type: tar.TypeBlock}}
		}},
		{name: "fifo", members: func(string) []testtar.Member {
			return []testtar.Member{{Name: "pipe", Type: tar.TypeFifo}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base, dest := sandbox(t)
			before := snapshot(t, base, dest)
			_, etcErr := os.Lstat("/etc/importer-archive-test-x")
			data := testtar.Build(t, tc.members(base))
			_, err := archive.Extract(context.Background(), bytes.NewReader(data), dest, archive.Options{AllowOutsideSymlinks: tc.allowLinks})
			require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
			t.Log(err)
			assert.Equal(t, before, snapshot(t, base, dest), "nothing outside dest changed")
			_, err = os.Lstat("/etc/importer-archive-test-x")
			assert.Equal(t, os.IsNotExist(etcErr), os.IsNotExist(err), "/etc untouched")
		})
	}
}

// A member replacing an earlier symlink of the same name replaces the link
// itself; it never writes through it.
func TestExtractReplacesSymlinkNotTarget(t *testing.T) {
	base, dest := sandbox(t)
	before := snapshot(t, base, dest)
	data := testtar.Build(t, []testtar.Member{
		{Name: "s", Type: tar.TypeSymlink, Link: filepath.Join(base, "sentinel", "keep")},
		{Name: "s", Type: tar.TypeReg, Body: []byte("a new file\n")},
	})
	_, err := archive.Extract(context.Background(), bytes.NewReader(data), dest, archive.Options{AllowOutsideSymlinks: true})
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dest, "s"))
	require.NoError(t, err)
	assert.Equal(t, "a new file\n", string(b))
	assert.Equal(t, before, snapshot(t, base, dest))
}

func TestCommit(t *testing.T) {
	base, dest := sandbox(t)
	require.NoError(t, os.WriteFile(filepath.Join(dest, "existing"), []byte("old"), 0o644))
	staging, err := archive.NewStaging(dest)
	require.NoError(t, err)
	_, err = archive.Extract(context.Background(), bytes.NewReader(testtar.Build(t, sampleTree())), staging, archive.Options{})
	require.NoError(t, err)
	require.NoError(t, archive.Commit(staging, dest))
	require.NoError(t, os.Remove(filepath.Join(dest, "existing")))
	checkSampleTree(t, dest)
	_, err = os.Stat(staging)
	assert.True(t, os.IsNotExist(err), "staging removed")

	// A second archive with a clashing name moves nothing.
	staging2, err := archive.NewStaging(dest)
	require.NoError(t, err)
	_, err = archive.Extract(context.Background(), bytes.NewReader(testtar.Build(t, []testtar.Member{
		{Name: "aaa-new", Type: tar.TypeReg, Body: []byte("new")},
		{Name: "top.txt", Type: tar.TypeReg, Body: []byte("clash")},
	})), staging2, archive.Options{})
	require.NoError(t, err)
	require.ErrorIs(t, archive.Commit(staging2, dest), errdefs.ErrInvalidOptions)
	_, err = os.Lstat(filepath.Join(dest, "aaa-new"))
	assert.True(t, os.IsNotExist(err), "nothing moved")
	require.NoError(t, os.RemoveAll(staging2))
	checkSampleTree(t, dest)
	_ = base

	_, err = archive.NewStaging(filepath.Join(dest, "top.txt"))
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

// TestExtractRefusesSymlinksAlreadyInTheDestination: a symlink that was in
// the destination before the archive (not one the archive planted) is not
// a way out either: a member under it is refused and nothing outside
// changes.
func TestExtractRefusesSymlinksAlreadyInTheDestination(t *testing.T) {
	base, dest := sandbox(t)
	require.NoError(t, os.Symlink(filepath.Join(base, "sentinel"), filepath.Join(dest, "pre")))
	before := snapshot(t, base, dest)
	data := testtar.Build(t, []testtar.Member{{Name: "pre/new", Type: tar.TypeReg, Body: []byte("escaped")}})
	_, err := archive.Extract(context.Background(), bytes.NewReader(data), dest, archive.Options{})
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	assert.Contains(t, err.Error(), `path goes through symlink "pre"`)
	assert.Equal(t, before, snapshot(t, base, dest), "nothing outside dest changed")
}

// swapAt reads r and, once the read reaches offset at, calls swap first.
type swapAt struct {
	r    *bytes.Reader
	at   int64
	swap func()
	done bool
}

func (s *swapAt) Read(p []byte) (int, error) {
	if pos := s.r.Size() - int64(s.r.Len()); !s.done && pos >= s.at {
		s.done = true
		s.swap()
	}
	return s.r.Read(p)
}

// TestExtractStaysInsideWhenADirectoryBecomesASymlink: a directory the
// extraction made and checked is swapped, while the archive is read, for a
// symlink out of the destination (someone else writing the volume at the
// same time). The next member under it is not written through it: every
// path is resolved in the destination's os.Root, which never lets a link
// lead out. Nothing outside changes.
func TestExtractStaysInsideWhenADirectoryBecomesASymlink(t *testing.T) {
	base, dest := sandbox(t)
	before := snapshot(t, base, dest)
	data := testtar.Build(t, []testtar.Member{
		{Name: "d/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "d/new", Type: tar.TypeReg, Body: []byte("escaped")},
	})
	src := &swapAt{r: bytes.NewReader(data), at: 512, swap: func() { // the second header
		require.NoError(t, os.Remove(filepath.Join(dest, "d")))
		require.NoError(t, os.Symlink(filepath.Join(base, "sentinel"), filepath.Join(dest, "d")))
	}}
	_, err := archive.Extract(context.Background(), src, dest, archive.Options{})
	require.Error(t, err)
	t.Log(err)
	assert.True(t, src.done, "the swap happened")
	assert.Equal(t, before, snapshot(t, base, dest), "nothing outside dest changed")
	_, err = os.Lstat(filepath.Join(base, "sentinel", "new"))
	assert.True(t, os.IsNotExist(err), "written through the swapped-in symlink")
}
