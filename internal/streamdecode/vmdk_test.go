package streamdecode

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func makeStreamVMDK(t testing.TB, raw, dir string) string {
	t.Helper()
	img := filepath.Join(dir, "disk.vmdk")
	testimg.Run(t, "qemu-img", "convert", "-q", "-f", "raw", "-O", "vmdk", "-o", "subformat=streamOptimized", raw, img)
	return img
}

func TestVMDKMatchesQemuImg(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	for _, size := range []int64{24<<20 + 3*512, 40 << 20} {
		raw := rawDisk(t, filepath.Join(dir, "disk.raw"), size, 40, uint64(size))
		img := makeStreamVMDK(t, raw, t.TempDir())
		want := reference(t, img, "vmdk")
		for _, zs := range []bool{false, true} {
			got, st, err := decodeFile(t, DecodeVMDK, img, int64(len(want)), zs, Options{})
			if err != nil {
				t.Fatalf("size %d zeroSink=%v: %v", size, zs, err)
			}
			sameBytes(t, got, want)
			t.Logf("size %d: stream %d bytes, %d grains, data %d", size, st.StreamBytes, st.Compressed, st.DataBytes)
		}
	}
}

func TestVMDKTruncated(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 8<<20, 40, 5)
	img := makeStreamVMDK(t, raw, dir)
	full, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{600, 65536, 70000, len(full) / 2, len(full) - 1536, len(full) - 1024, len(full) - 512, len(full) - 1} {
		p := filepath.Join(t.TempDir(), "cut.vmdk")
		if err := os.WriteFile(p, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		got, _, err := decodeFile(t, DecodeVMDK, p, 8<<20, false, Options{})
		if err == nil {
			// Only metadata copies after the last grain were cut, which
			// qemu (reading through the header's tables) does not need
			// either: the disk must be what qemu-img reads.
			sameBytes(t, got, reference(t, p, "vmdk"))
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidImage) {
			t.Errorf("cut at %d of %d: %v, want ErrInvalidImage", cut, len(full), err)
		}
	}
}

func TestVMDKNotStreamOptimized(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 4<<20, 40, 6)
	img := filepath.Join(dir, "sparse.vmdk")
	testimg.Run(t, "qemu-img", "convert", "-q", "-f", "raw", "-O", "vmdk", raw, img)
	if _, _, err := decodeFile(t, DecodeVMDK, img, 4<<20, false, Options{}); !errors.Is(err, errdefs.ErrNotStreamable) {
		t.Fatalf("monolithicSparse: %v, want ErrNotStreamable", err)
	}
}

// randomStreamVMDK is a streamOptimized vmdk of size random bytes (every
// grain takes its whole 64 KiB of the stream), and those bytes.
func randomStreamVMDK(t *testing.T, size int, seed byte) (img string, disk []byte) {
	t.Helper()
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	disk = make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(disk)
	raw := filepath.Join(dir, "disk.raw")
	require.NoError(t, os.WriteFile(raw, disk, 0o644))
	return makeStreamVMDK(t, raw, dir), disk
}

// While the writes lag, the decoder reads on through the grains it may
// hold: with 4 × workers + 2 grains it stopped within the first MiB.
func TestVMDKReadsOnWhileTheWritesLag(t *testing.T) {
	img, _ := randomStreamVMDK(t, 16<<20, 7)
	read := readWhileTheFirstWriteWaits(t, DecodeVMDK, img, reference(t, img, "vmdk"))
	assert.GreaterOrEqual(t, read, int64(grainsAheadBytes),
		"read %d bytes while the first write waited, want the %d bytes of grains it may hold", read, grainsAheadBytes)
}

// The compressed grains are read into a few reused buffers, not one
// allocation each: decoding 48 MiB of random grains allocates far less
// than the stream (each grain allocated: 50+ MiB, the heap then held at
// twice what is live).
func TestVMDKGrainsDoNotAllocateTheStream(t *testing.T) {
	img, noise := randomStreamVMDK(t, 48<<20, 9)
	stream, err := os.ReadFile(img)
	require.NoError(t, err)
	sink := &memSink{t: t, b: make([]byte, len(noise))}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = DecodeVMDK(context.Background(), bytes.NewReader(stream), sink, Options{Workers: 2})
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	sameBytes(t, sink.b, noise)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("stream %d bytes, allocated %d", len(stream), allocated)
	assert.Less(t, allocated, uint64(len(stream)/4), "allocated %d bytes decoding a %d-byte stream", allocated, len(stream))
}
