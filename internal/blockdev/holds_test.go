//go:build linux

package blockdev_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/blockdev"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func fileLeaf(t *testing.T, path string) blockdev.Leaf {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return blockdev.Leaf{File: true, Dev: st.Dev, Ino: st.Ino}
}

func onlyExtent(t *testing.T, path string) blockdev.Extent {
	t.Helper()
	ext, err := blockdev.Holds(path)
	require.NoError(t, err)
	require.Len(t, ext, 1, "%s holds %+v", path, ext)
	return ext[0]
}

// A loop device holds the run of its backing file it maps (the driver's
// st_dev and inode of the file, its offset and size limit), a partition of
// it its run of that, whatever the loop device's node is called.
func TestHoldsFollowsLoopDevicesAndTheirPartitions(t *testing.T) {
	dir := t.TempDir()
	backing := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(backing, make([]byte, 8<<20), 0o600))
	leaf := fileLeaf(t, backing)

	file := onlyExtent(t, backing)
	assert.Equal(t, blockdev.Extent{Leaf: leaf, Off: 0, Len: -1, Via: "file " + backing}, file)

	whole := testimg.AttachLoop(t, backing, "-P")
	e := onlyExtent(t, whole)
	assert.Equal(t, leaf, e.Leaf)
	assert.EqualValues(t, 0, e.Off)
	assert.EqualValues(t, -1, e.Len)
	assert.Contains(t, e.Via, backing)
	assert.True(t, e.Overlaps(file))

	// Another node of the loop device (the driver is asked through it).
	var st unix.Stat_t
	require.NoError(t, unix.Stat(whole, &st))
	alias := filepath.Join(dir, "alias")
	require.NoError(t, unix.Mknod(alias, unix.S_IFBLK|0o600, int(st.Rdev)))
	assert.Equal(t, leaf, onlyExtent(t, alias).Leaf)

	part := onlyExtent(t, testimg.AddPartition(t, whole, 1, 2048, 4096))
	assert.Equal(t, leaf, part.Leaf)
	assert.EqualValues(t, 1<<20, part.Off, "the partition's first byte in the file")
	assert.EqualValues(t, 2<<20, part.Len)
	assert.True(t, part.Overlaps(file))
	assert.Contains(t, part.Via, "partition")

	first := testimg.AttachLoop(t, backing, "--offset", fmt.Sprint(1<<20), "--sizelimit", fmt.Sprint(1<<20))
	second := testimg.AttachLoop(t, backing, "--offset", fmt.Sprint(3<<20))
	a, b := onlyExtent(t, first), onlyExtent(t, second)
	assert.Equal(t, blockdev.Extent{Leaf: leaf, Off: 1 << 20, Len: 1 << 20, Via: a.Via}, a)
	assert.Equal(t, blockdev.Extent{Leaf: leaf, Off: 3 << 20, Len: -1, Via: b.Via}, b)
	assert.False(t, a.Overlaps(b), "two disjoint runs of one file")
	assert.True(t, a.Overlaps(part))
	assert.False(t, b.Overlaps(part), "the partition ends where the second run starts")

	// The backing file renamed: the driver still names it by its inode.
	moved := filepath.Join(dir, "moved.img")
	require.NoError(t, os.Rename(backing, moved))
	assert.Equal(t, leaf, onlyExtent(t, whole).Leaf)
}

// A device over slaves (device-mapper, md) holds all that each slave holds,
// narrowed by nothing, since its table is not read. This kernel has no
// device-mapper, so the sysfs of a dm device over a real loop device and a
// partition of it is laid out in a directory.
func TestHoldsFollowsTheSlavesOfADevice(t *testing.T) {
	dir := t.TempDir()
	backing := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(backing, make([]byte, 8<<20), 0o600))
	loop := testimg.AttachLoop(t, backing, "-P")
	part := testimg.AddPartition(t, loop, 1, 2048, 4096)
	other := filepath.Join(dir, "other.img")
	require.NoError(t, os.WriteFile(other, make([]byte, 1<<20), 0o600))
	otherLoop := testimg.AttachLoop(t, other)

	sysfs := filepath.Join(dir, "sys")
	devs := filepath.Join(sysfs, "dev", "block")
	require.NoError(t, os.MkdirAll(devs, 0o755))
	sysfsOf := func(node string) (string, string) {
		var st unix.Stat_t
		require.NoError(t, unix.Stat(node, &st))
		id := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		return id, filepath.Join("/sys/dev/block", id)
	}
	for _, node := range []string{loop, part, otherLoop} {
		id, link := sysfsOf(node)
		require.NoError(t, os.Symlink(link, filepath.Join(devs, id)))
	}
	dm := filepath.Join(devs, "253:7")
	require.NoError(t, os.MkdirAll(filepath.Join(dm, "dm"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dm, "slaves"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dm, "uevent"), []byte("MAJOR=253\nMINOR=7\nDEVNAME=dm-7\n"), 0o644))
	for _, node := range []string{part, otherLoop} {
		_, link := sysfsOf(node)
		require.NoError(t, os.Symlink(link, filepath.Join(dm, "slaves", filepath.Base(node))))
	}
	dmNode := filepath.Join(dir, "dm-7")
	require.NoError(t, unix.Mknod(dmNode, unix.S_IFBLK|0o600, int(unix.Mkdev(253, 7))))

	ext, err := blockdev.Stack{Sysfs: sysfs, Dev: "/dev"}.Holds(dmNode)
	require.NoError(t, err)
	require.Len(t, ext, 2)
	assert.Equal(t, fileLeaf(t, backing), ext[0].Leaf)
	assert.EqualValues(t, 1<<20, ext[0].Off, "all of the partition")
	assert.True(t, ext[0].Whole)
	assert.Contains(t, ext[0].Via, "dm-7 is over "+filepath.Base(part))
	assert.Equal(t, fileLeaf(t, other), ext[1].Leaf)
	assert.True(t, ext[0].Overlaps(onlyExtent(t, backing)))

	// A device with no sysfs entry is itself.
	lone := filepath.Join(dir, "lone")
	require.NoError(t, unix.Mknod(lone, unix.S_IFBLK|0o600, int(unix.Mkdev(253, 99))))
	ext, err = blockdev.Stack{Sysfs: sysfs, Dev: "/dev"}.Holds(lone)
	require.NoError(t, err)
	assert.Equal(t, []blockdev.Extent{{Leaf: blockdev.Leaf{Dev: unix.Mkdev(253, 99)}, Len: -1, Via: lone}}, ext)
}
