package cloner_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// The storage migration of a VM disk from a filesystem class to a block
// one, a second time: the source volume is a directory holding disk.img,
// the target a device holding the copy the first clone made, with blocks
// of disk.img changed since.

// fsBlockVolume makes a source volume (a directory) holding disk.img, raw,
// of size bytes, and a loop device of devSize bytes holding that disk.img
// (an earlier clone's copy; past it the device keeps LoopDevice's 0xA5
// pattern, an old volume's bytes); prepare, when set, runs on the device
// first. Then disk.img changes in blocks blocks, which it returns the
// count of.
func fsBlockVolume(t *testing.T, size, devSize int64, seed uint64, blocks int, prepare func(dev string)) (dir, img, dev string, changed int64) {
	t.Helper()
	dir = t.TempDir()
	img = testimg.Raw(t, dir, "disk.img", size, seed)
	dev = testimg.LoopDevice(t, t.TempDir(), devSize)
	if prepare != nil {
		prepare(dev)
	}
	testimg.WriteDevice(t, dev, img)
	if blocks > 0 {
		changed = testimg.WriteRandomAt(t, img, seed+100, delta.BlockSize, blockStarts(blocks)...)
	}
	require.EqualValues(t, blocks, changed)
	return dir, img, dev, changed
}

// deviceNodeBeside makes a node for the block device dev in a directory of
// the test's, beside a file that must stay (as /dev/cdi-block-volume lies
// beside /dev/termination-log in CDI's pod), and returns both paths.
func deviceNodeBeside(t *testing.T, dev string) (node, sentinel string) {
	t.Helper()
	devDir := t.TempDir()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dev, &st))
	node = filepath.Join(devDir, "cdi-block-volume")
	require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(st.Rdev)))
	sentinel = filepath.Join(devDir, "termination-log")
	require.NoError(t, os.WriteFile(sentinel, []byte("kept"), 0o600))
	return node, sentinel
}

func assertKept(t *testing.T, sentinel string) {
	t.Helper()
	b, err := os.ReadFile(sentinel)
	require.NoError(t, err, "the device's directory was emptied")
	assert.Equal(t, "kept", string(b))
}

// TestFilesystemToBlockSecondCloneIsADeltaPassOfDiskImage: the volume
// holds only its raw disk.img and the server's target is a device: the
// clone is the block delta pass of disk.img (the server's HEAD says its
// target takes it), as a device's would be: only the changed blocks and
// the signature cross the wire, the server checks the content digest
// before it commits, and the device then holds disk.img byte for byte;
// the device's directory is left alone (no volume's pass).
func TestFilesystemToBlockSecondCloneIsADeltaPassOfDiskImage(t *testing.T) {
	dir, img, dev, changed := fsBlockVolume(t, deltaSize, deltaSize, 92, 8, nil)
	node, sentinel := deviceNodeBeside(t, dev)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: node})

	res, err := sendTree(t, p, s.url(""), dir, "", 0)
	require.NoError(t, err)
	require.NotNil(t, res.Delta, "a delta pass of disk.img")
	assert.Equal(t, cloner.ProtocolSparseV2+"+"+cloner.DeltaV1, res.Protocol)
	assert.Equal(t, changed, res.Delta.BlocksChanged)
	assert.True(t, res.Delta.Final)
	signature := int64(deltaSize / delta.BlockSize * 32)
	assert.LessOrEqual(t, res.WireBytes, changed*delta.BlockSize+signature+16<<10, "wire bytes %d for %d changed blocks", res.WireBytes, changed)
	t.Logf("%d of %d blocks changed: %d bytes on the wire (signature %d) for a %d-byte disk.img",
		changed, res.Delta.Blocks, res.WireBytes, res.Delta.SignatureBytes, int64(deltaSize))

	got, err := s.wait(t)
	require.NoError(t, err)
	require.NotNil(t, got.Delta)
	assert.True(t, got.Delta.Received)
	assert.Equal(t, changed, got.Delta.BlocksChanged)
	assert.Equal(t, testimg.ContentDigest(t, img), got.ContentDigest)
	assert.Equal(t, res.Digest, got.ContentDigest)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dev, -1), "the device holds disk.img")
	assertKept(t, sentinel)
}

// TestFilesystemToBlockDeltaOntoALargerDeviceLeavesWhatAFullCloneLeaves:
// disk.img is smaller than the device (the storage rounds a block volume
// up). The pass is of the device's first disk.img-size bytes, and the
// device then reads exactly as a second device with the same bytes before
// reads after a full clone of the volume: disk.img, then the old bytes,
// and, where the device's last sector held an old GPT backup header, its
// last MiB zeroed (the full clone's wipe of an old image), also by a pass
// that changed no block.
func TestFilesystemToBlockDeltaOntoALargerDeviceLeavesWhatAFullCloneLeaves(t *testing.T) {
	const size, devSize = deltaSize, deltaSize + 8*mib
	p := newPKI(t)
	gpt := func(dev string) { testimg.BootableGPT(t, dev, 512) }
	for _, tc := range []struct {
		name    string
		blocks  int
		prepare func(dev string)
	}{
		{"old bytes past disk.img", 8, nil},
		{"an old GPT backup header at the device's end", 8, gpt},
		{"an old GPT backup header at the device's end, disk.img unchanged", 0, gpt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, img, dev, changed := fsBlockVolume(t, size, devSize, 93, tc.blocks, tc.prepare)
			// The same device, cloned in full.
			full := testimg.LoopDevice(t, t.TempDir(), devSize)
			testimg.CopyOnto(t, dev, full)
			require.Equal(t, tc.prepare != nil, testimg.HasBackupGPT(t, dev))

			s := startServer(t, p, importer.Options{Target: full})
			fres, err := send(t, p, s.url(""), cloner.ContentTypeFilesystem, dir, cloner.ProtocolAuto)
			require.NoError(t, err)
			require.Nil(t, fres.Delta)
			fgot, err := s.wait(t)
			require.NoError(t, err)

			s = startServer(t, p, importer.Options{Target: dev})
			res, err := sendTree(t, p, s.url(""), dir, "", 0)
			require.NoError(t, err)
			require.NotNil(t, res.Delta, "a delta pass onto the larger device")
			assert.Equal(t, changed, res.Delta.BlocksChanged)
			assert.Less(t, res.WireBytes, fres.WireBytes/10, "the pass sent %d bytes, the full clone %d", res.WireBytes, fres.WireBytes)
			t.Logf("delta pass: %d bytes on the wire; full clone: %d", res.WireBytes, fres.WireBytes)
			got, err := s.wait(t)
			require.NoError(t, err)
			assert.Equal(t, testimg.ContentDigest(t, img), got.ContentDigest)
			assert.EqualValues(t, size, got.VirtualSize)
			assert.EqualValues(t, devSize, fgot.TargetSize)
			assert.EqualValues(t, fgot.TargetSize, got.TargetSize, "the device's size, as the full clone reports it")

			assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dev, size), "the device starts with disk.img")
			assert.Equal(t, testimg.Digest(t, full, -1), testimg.Digest(t, dev, -1), "the device reads as after a full clone")
			if tc.prepare != nil {
				assert.False(t, testimg.HasBackupGPT(t, dev))
				testimg.AssertZeros(t, dev, devSize-1*mib, 1*mib)
			}
			assertPattern(t, dev, size, devSize-size-1*mib)
		})
	}
}

// assertPattern fails unless path holds LoopDevice's 0xA5 pattern in
// [off, off+n).
func assertPattern(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, n)
	_, err = f.ReadAt(buf, off)
	require.NoError(t, err)
	for i, b := range buf {
		if b != 0xA5 {
			t.Fatalf("%s: byte at %d is %#x, the old 0xa5", path, off+int64(i), b)
		}
	}
}

// TestFilesystemToBlockDeltaOfAQcow2DiskImageGoesWhole: a disk.img that
// is no raw disk (a qcow2 in a filesystem volume) takes no delta pass, as
// the local delta route takes none of a converted image: its records go
// whole onto the device, as without -delta.
func TestFilesystemToBlockDeltaOfAQcow2DiskImageGoesWhole(t *testing.T) {
	testimg.Need(t, "qemu-img")
	_, qcow2 := testimg.RawAndQCOW2(t, t.TempDir(), deltaSize, 94)
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	testimg.CopyOnto(t, qcow2, img)
	dev := testimg.LoopDevice(t, t.TempDir(), deltaSize)
	testimg.WriteDevice(t, dev, img)
	testimg.WriteRandomAt(t, img, 95, 4096, 1*mib) // a cluster changed since
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dev})

	res, err := sendTree(t, p, s.url(""), dir, "", 0)
	require.NoError(t, err)
	assert.Nil(t, res.Delta, "no delta pass of a qcow2")
	assert.Equal(t, cloner.ProtocolSparseV2, res.Protocol, "disk.img's records")
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Nil(t, got.Delta)
	n := testimg.FileSize(t, img)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dev, n), "the device holds disk.img's bytes")
}

// TestFilesystemToBlockDeltaOfAVolumeWithMoreFilesGoesWholeAndLeavesTheDeviceDirectoryAlone:
// a volume holding more than disk.img has no single disk image to pass;
// the volume's own pass lays out a directory and removes what its
// manifest does not list, so the server must not take one onto a device
// (it took the device's directory, /dev, for the volume and removed
// entries of it): it answers 412 and the clone goes whole (CDI's tar,
// whose disk.img the server writes onto the device), the device's
// directory untouched.
func TestFilesystemToBlockDeltaOfAVolumeWithMoreFilesGoesWholeAndLeavesTheDeviceDirectoryAlone(t *testing.T) {
	dir, img, dev, _ := fsBlockVolume(t, deltaSize, deltaSize, 91, 8, nil)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a disk"), 0o644))
	node, sentinel := deviceNodeBeside(t, dev)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: node})

	res, err := sendTree(t, p, s.url(""), dir, "", 0)
	require.NoError(t, err)
	assert.Nil(t, res.Delta, "no filesystem pass onto a device")
	assert.Equal(t, cloner.ProtocolSnappy, res.Protocol, "CDI's tar")
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Nil(t, got.Delta)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dev, -1), "the device holds disk.img")
	assertKept(t, sentinel)
}

// TestFilesystemToBlockDeltaOntoAnExactSizeServerIsRefused: a server
// asked for the exact size takes no pass onto a device larger than
// disk.img (412), and the full clone it gets instead is refused, as
// without -delta; the device is left as it was.
func TestFilesystemToBlockDeltaOntoAnExactSizeServerIsRefused(t *testing.T) {
	dir, _, dev, _ := fsBlockVolume(t, deltaSize, deltaSize+8*mib, 96, 8, nil)
	before := testimg.Digest(t, dev, -1)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dev, TargetOptions: importer.TargetOptions{ExactSize: true}})
	res, err := cloner.Send(context.Background(), cloner.Options{
		URL: s.url(""), ContentType: cloner.ContentTypeFilesystem, Source: dir, Delta: true, Retries: -1,
		Client: p.clientFor(t, &p.client), Logger: testimg.Logger(t),
	})
	require.Error(t, err)
	if res != nil {
		assert.Nil(t, res.Delta)
	}
	assert.Equal(t, before, testimg.Digest(t, dev, -1), "the device was written")
}

// TestFilesystemToBlockDeltaPassResumesAfterADrop: the connection carrying
// the disk.img pass's runs is cut; the pass resumes where the server
// stands, as a device's does, and the device ends up equal to disk.img.
func TestFilesystemToBlockDeltaPassResumesAfterADrop(t *testing.T) {
	// 60 blocks of random bytes, which do not compress: 3.75 MiB of runs.
	dir, img, dev, changed := fsBlockVolume(t, deltaSize, deltaSize, 97, 60, nil)
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dev})
	proxy := startCuttingProxy(t, s.addr, 3*mib)

	res, err := sendTree(t, p, s.url(proxy.addr()), dir, "", 10)
	require.NoError(t, err)
	assert.True(t, proxy.cutted.Load(), "the proxy never cut")
	require.NotNil(t, res.Delta)
	assert.GreaterOrEqual(t, res.Resumes, 1)
	require.NotEmpty(t, res.ResumedAt)
	assert.Positive(t, res.ResumedAt[0], "resumed where the server stood, not from the start")
	assert.Equal(t, changed, res.Delta.BlocksChanged)
	got, err := s.wait(t)
	require.NoError(t, err)
	assert.Equal(t, res.Digest, got.ContentDigest)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dev, -1))
}
