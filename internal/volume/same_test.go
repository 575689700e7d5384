//go:build linux

package volume_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/volume"
)

// A loop device over the source, a partition of it, or a loop device over
// part of the source file is the source's bytes under another name; a loop
// device over another run of the file, or over a file on the source
// device's filesystem, is not.
func TestRefuseSameVolumeSeesThroughLoopDevicesAndPartitions(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(disk, testimg.RandomBytes(8<<20, 3), 0o600))
	loop := testimg.AttachLoop(t, disk, "-P")
	part := testimg.AddPartition(t, loop, 1, 2048, 4096) // [1 MiB, 3 MiB) of disk.img
	head := testimg.AttachLoop(t, disk, "--sizelimit", fmt.Sprint(1<<20))
	tail := testimg.AttachLoop(t, disk, "--offset", fmt.Sprint(3<<20))

	for _, c := range []struct{ src, dst string }{
		{disk, loop}, {loop, disk}, {disk, part}, {part, disk},
		{loop, part}, {part, loop}, {disk, head}, {tail, loop}, {head, loop},
	} {
		err := volume.RefuseSameVolume(c.src, c.dst)
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions, "%s onto %s", c.src, c.dst)
		assert.Contains(t, err.Error(), "source "+c.src+" and target "+c.dst+" hold the same bytes")
		assert.Contains(t, err.Error(), disk, "names the file under both")
	}
	for _, c := range []struct{ src, dst string }{
		{head, part}, {part, tail}, {head, tail}, {tail, head},
	} {
		require.NoError(t, volume.RefuseSameVolume(c.src, c.dst), "%s onto %s: apart in disk.img", c.src, c.dst)
	}

	// A device holding a filesystem, and a loop device over a file in that
	// filesystem: the copy goes through the filesystem, which keeps them
	// apart.
	testimg.Need(t, "mkfs.ext4")
	fs := testimg.LoopDevice(t, dir, 64<<20)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", fs).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", fs, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	inner := filepath.Join(mnt, "inner.img")
	require.NoError(t, os.WriteFile(inner, make([]byte, 4<<20), 0o600))
	innerLoop := testimg.AttachLoop(t, inner)
	require.NoError(t, volume.RefuseSameVolume(fs, innerLoop))
	require.ErrorIs(t, volume.RefuseSameVolume(inner, innerLoop), errdefs.ErrInvalidOptions)
}
