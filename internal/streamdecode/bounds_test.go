package streamdecode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testkit/hostileimg"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// decodeGenerated decodes what write produces, streamed through a pipe,
// into a disk of size bytes, and reports the bytes the decode allocated:
// an upper bound of what it held at once, whatever the garbage collector
// did meanwhile.
func decodeGenerated(t *testing.T, dec decodeFunc, size int64, o Options, write func(w io.Writer) error) ([]byte, Stats, uint64, error) {
	t.Helper()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	defer pr.Close()
	m := &memSink{t: t, b: make([]byte, size)}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	st, err := dec(context.Background(), pr, m, o)
	runtime.ReadMemStats(&after)
	return m.b, st, after.TotalAlloc - before.TotalAlloc, err
}

// decoderFixedBytes is what a decode allocates beyond its bookkeeping
// budget: the stream chunks (4 x 4 MiB), inflate and output buffers, the
// writer goroutine's buffer, the test's pipe.
const decoderFixedBytes = 24 << 20

// A streamOptimized vmdk whose header names up to 62.5 MiB of grain
// tables ahead of its grains, 16.4 million grains that never come: what
// the decoder holds for them is charged to MaxBuffered, so the decode
// allocates little more than the tables' own bytes (it allocated 1.2 GiB
// when it kept a map entry per expected grain), and the image is refused:
// for the grains missing, or, when tables and the bits of the grains met
// pass the budget, as a bookkeeping *BufferError.
func TestVMDKTablesAheadStayInBudget(t *testing.T) {
	for _, tables := range []int{30000, 32000} {
		_, _, alloc, err := decodeGenerated(t, DecodeVMDK, 1<<20, Options{}, func(w io.Writer) error {
			return hostileimg.VMDKTablesAhead(w, tables)
		})
		t.Logf("%d grain tables: allocated %d MiB: %v", tables, alloc>>20, err)
		var be *BufferError
		switch {
		case tables == 30000 && !errors.Is(err, errdefs.ErrInvalidImage):
			t.Errorf("%d grain tables: %v, want ErrInvalidImage (grains missing)", tables, err)
		case tables == 32000 && (!errors.As(err, &be) || !be.Bookkeeping):
			t.Errorf("%d grain tables: %v, want a bookkeeping *BufferError", tables, err)
		}
		if alloc > DefaultMaxBuffered+decoderFixedBytes {
			t.Errorf("%d grain tables: the decode allocated %d MiB, more than its %d MiB budget and %d MiB of buffers", tables, alloc>>20, DefaultMaxBuffered>>20, decoderFixedBytes>>20)
		}
	}
}

// Empty grain tables in VMware's layout are remembered until the grain
// directory says which it uses: 16 bytes each, against MaxBuffered. Past
// it the decode stops with a bookkeeping *BufferError
// (ErrNotStreamable), not with memory growing by the table; within it the
// image decodes.
func TestVMDKManyTablesCharged(t *testing.T) {
	const max = 1 << 20
	_, _, _, err := decodeGenerated(t, DecodeVMDK, 512<<10, Options{MaxBuffered: max}, func(w io.Writer) error {
		return hostileimg.VMDKManyTables(w, 100000)
	})
	var be *BufferError
	if !errors.As(err, &be) || !be.Bookkeeping || !errors.Is(err, errdefs.ErrNotStreamable) {
		t.Fatalf("100000 grain tables in a %d-byte budget: %v, want a bookkeeping *BufferError", max, err)
	}
	got, _, _, err := decodeGenerated(t, DecodeVMDK, 512<<10, Options{MaxBuffered: max}, func(w io.Writer) error {
		return hostileimg.VMDKManyTables(w, 1000)
	})
	if err != nil {
		t.Fatalf("1000 grain tables: %v", err)
	}
	if !iostage.IsZero(got) {
		t.Errorf("the empty disk decoded with data")
	}
}

// A dynamic VHD's block table of 3.3 million allocated entries: the
// decode allocates no more than its 64 MiB budget and its buffers (it
// allocated about 240 MB when the extents were grown by append and
// copied once more to sort them).
func TestVHDBlockTableStaysInBudget(t *testing.T) {
	const entries = DefaultMaxBuffered / 20
	_, _, alloc, err := decodeGenerated(t, DecodeVHD, 1<<20, Options{}, func(w io.Writer) error {
		return hostileimg.VHDManyBlocks(w, 1<<20, entries)
	})
	t.Logf("allocated %d MiB: %v", alloc>>20, err)
	if !errors.Is(err, errdefs.ErrInvalidImage) {
		t.Errorf("decode: %v, want ErrInvalidImage (blocks past the end)", err)
	}
	if alloc > DefaultMaxBuffered+decoderFixedBytes {
		t.Errorf("the decode allocated %d MiB, more than its %d MiB budget and %d MiB of buffers", alloc>>20, DefaultMaxBuffered>>20, decoderFixedBytes>>20)
	}
}

// 256 MiB of bytes no table refers to, before the refcount table of a
// 16 MiB disk: once the L1 and L2 tables are read nothing can claim them
// (a refcount table's blocks are skipped), so none is held or spilled
// (the decoder spilled 255 MiB of them when it kept bytes while any table
// was still to come), and the disk decodes.
func TestQCOW2BytesNoTableReferstoAreDropped(t *testing.T) {
	disk, clusters := hostileimg.Disk(256, 3)
	q := hostileimg.QCOW2{VirtualSize: int64(len(disk)), Clusters: clusters, Filler: 256 << 20}
	spillDir := t.TempDir()
	got, st, _, err := decodeGenerated(t, DecodeQCOW2, int64(len(disk)), Options{MaxBuffered: 1 << 20, SpillDir: spillDir}, func(w io.Writer) error {
		_, err := q.WriteTo(w)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, disk)
	if st.BufferedBytes != 0 || st.SpilledBytes != 0 {
		t.Errorf("held %d bytes and spilled %d of bytes no table refers to", st.BufferedBytes, st.SpilledBytes)
	}
	emptyDir(t, spillDir)
}

// Bytes before an L2 table may be its clusters, so they are held; but a
// 16 MiB disk's tables refer to at most 16 MiB, so the spill stops there
// with a *SpillLimitError (ErrNotStreamable), not after the 64 MiB of
// filler (the decoder spilled all of it and completed); Options.MaxSpill
// caps it lower still. Without the filler the image decodes.
func TestQCOW2SpillBoundedByVirtualSize(t *testing.T) {
	disk, clusters := hostileimg.Disk(256, 3)
	for _, c := range []struct {
		filler, maxSpill, limit int64
		capped                  bool
	}{
		{64 << 20, 0, int64(len(disk)), false},
		{8 << 20, 4 << 20, 4 << 20, true},
		{0, 0, 0, false},
	} {
		q := hostileimg.QCOW2{VirtualSize: int64(len(disk)), Clusters: clusters, Filler: c.filler, L2AfterFiller: true}
		spillDir := t.TempDir()
		got, st, _, err := decodeGenerated(t, DecodeQCOW2, int64(len(disk)), Options{MaxBuffered: 1 << 20, SpillDir: spillDir, MaxSpill: c.maxSpill}, func(w io.Writer) error {
			_, err := q.WriteTo(w)
			return err
		})
		t.Logf("filler %d, cap %d: spilled %d (peak %d): %v", c.filler, c.maxSpill, st.SpilledBytes, st.PeakSpilled, err)
		emptyDir(t, spillDir)
		if c.limit == 0 {
			if err != nil {
				t.Fatalf("no filler: %v", err)
			}
			sameBytes(t, got, disk)
			continue
		}
		var se *SpillLimitError
		if !errors.As(err, &se) || !errors.Is(err, errdefs.ErrNotStreamable) || se.Limit != c.limit || se.Capped != c.capped {
			t.Fatalf("filler %d, cap %d: %v, want a *SpillLimitError at %d", c.filler, c.maxSpill, err, c.limit)
		}
		if st.PeakSpilled > c.limit {
			t.Errorf("spilled %d bytes, past the bound of %d", st.PeakSpilled, c.limit)
		}
	}
}

// A zstd cluster must inflate to exactly the cluster size, as qemu wants
// it (qcow2_zstd_decompress fails when the frame is not done once the
// cluster is full): one 512 bytes longer is refused with ErrInvalidImage
// (the decoder took the first 64 KiB and completed). Sound zstd clusters
// decode to what qemu-img reads.
func TestQCOW2ZstdClusterPastClusterSizeRefused(t *testing.T) {
	testimg.Need(t, "qemu-img")
	disk, clusters := hostileimg.Disk(32, 3)
	sound := hostileimg.QCOW2{VirtualSize: int64(len(disk)), Clusters: clusters, Zstd: true}
	img := filepath.Join(t.TempDir(), "zstd.qcow2")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sound.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := reference(t, img, "qcow2")
	sameBytes(t, want, disk)
	got, st, err := decodeFile(t, DecodeQCOW2, img, int64(len(disk)), false, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, want)
	if st.Compressed == 0 {
		t.Fatal("no compressed cluster was decoded")
	}

	long := slices.Clone(clusters)
	long[3] = append(slices.Clone(clusters[3]), make([]byte, 512)...)
	_, _, _, err = decodeGenerated(t, DecodeQCOW2, int64(len(disk)), Options{}, func(w io.Writer) error {
		_, err := hostileimg.QCOW2{VirtualSize: int64(len(disk)), Clusters: long, Zstd: true}.WriteTo(w)
		return err
	})
	if !errors.Is(err, errdefs.ErrInvalidImage) || !strings.Contains(err.Error(), "inflates past") {
		t.Fatalf("a zstd cluster of 64 KiB + 512: %v, want ErrInvalidImage", err)
	}
}

// A streamOptimized vmdk in VMware's layout whose footer does not start
// with "KDMV" is refused with ErrInvalidImage, as qemu refuses it
// ("Invalid footer"); the same image with the magic decodes to what
// qemu-img reads.
func TestVMDKFooterMagicChecked(t *testing.T) {
	testimg.Need(t, "qemu-img")
	disk, _ := hostileimg.Disk(48, 3)
	for _, magic := range []string{"KDMV", "KDMW"} {
		img := filepath.Join(t.TempDir(), "footer.vmdk")
		f, err := os.Create(img)
		if err != nil {
			t.Fatal(err)
		}
		if err := hostileimg.VMDKFooter(f, disk, magic); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, _, err := decodeFile(t, DecodeVMDK, img, int64(len(disk)), true, Options{})
		if magic == "KDMV" {
			if err != nil {
				t.Fatalf("sound footer: %v", err)
			}
			sameBytes(t, got, reference(t, img, "vmdk"))
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidImage) || !strings.Contains(err.Error(), "magic") {
			t.Errorf("footer magic %q: %v, want ErrInvalidImage", magic, err)
		}
	}
}

// Grains that pass before their grain table (VMware's layout) are
// remembered until it comes, 16 bytes each against MaxBuffered: 16
// grains do not fit in 128 bytes (a count bound of a million grains was
// all there was), and fit in the default.
func TestVMDKPendingGrainsCharged(t *testing.T) {
	disk, _ := hostileimg.Disk(48, 3)
	write := func(w io.Writer) error { return hostileimg.VMDKFooter(w, disk, "KDMV") }
	_, _, _, err := decodeGenerated(t, DecodeVMDK, int64(len(disk)), Options{MaxBuffered: 128}, write)
	var be *BufferError
	if !errors.As(err, &be) || !be.Bookkeeping {
		t.Fatalf("16 grains before their table in a 128-byte budget: %v, want a bookkeeping *BufferError", err)
	}
	got, _, _, err := decodeGenerated(t, DecodeVMDK, int64(len(disk)), Options{}, write)
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, disk)
}

// sharedCompressedQCOW2 is a 512 MiB qcow2 (zstd) whose 8192 L2 entries
// all point at the same compressed bytes: guest cluster from's frame,
// claimed as sectors 512-byte sectors (the cluster after it is data too,
// so that up to 128 KiB claim no table). With from 61 and 256 sectors
// they run from 4 MiB to 4 MiB + 128 KiB, across the end of one of the
// decoder's 4 MiB reads (they follow the 64 KiB header). It returns the
// image and the cluster every guest cluster then holds.
func sharedCompressedQCOW2(t *testing.T, from int, sectors uint64) (img, cluster []byte) {
	t.Helper()
	const n = 8192
	clusters := make([][]byte, n)
	for i := 0; i <= from+1; i++ {
		clusters[i] = bytes.Repeat([]byte{7, byte(i), 2, 3}, 16384)
	}
	var b bytes.Buffer
	if _, err := (hostileimg.QCOW2{VirtualSize: n << 16, Clusters: clusters, Zstd: true}).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	img = b.Bytes()
	l2 := img[2<<16 : 3<<16] // header, L1, L2, then the clusters in guest order
	e := uint64(1)<<62 | (sectors-1)<<54 | uint64(3+from)<<16
	for i := range n {
		binary.BigEndian.PutUint64(l2[8*i:], e)
	}
	return img, clusters[from]
}

// Compressed clusters are gathered into buffers counted against
// MaxBuffered. 8192 clusters sharing 128 KiB that a read boundary cuts
// are all being gathered at once: the decoder gave each its own buffer
// and held 1 GiB for a 4 MiB image; now the decode stops at the bound
// with a *BufferError (ErrNotStreamable, so the engine converts with
// qemu-img instead). Sharing bytes within a read, they are gathered one
// after another into the same few buffers: the image decodes, allocating
// little (532 MiB with a buffer per cluster).
func TestQCOW2CompressedClustersSharingBytesStayInBudget(t *testing.T) {
	img, _ := sharedCompressedQCOW2(t, 61, 256)
	const maxBuffered = 16 << 20
	_, _, allocated, err := decodeGenerated(t, DecodeQCOW2, 512<<20, Options{MaxBuffered: maxBuffered}, func(w io.Writer) error {
		_, err := w.Write(img)
		return err
	})
	t.Logf("across a read: allocated %d MiB: %v", allocated>>20, err)
	var be *BufferError
	if !errors.As(err, &be) || !errors.Is(err, errdefs.ErrNotStreamable) {
		t.Fatalf("got %v, want a *BufferError", err)
	}
	if !strings.Contains(err.Error(), "shares its bytes with more compressed clusters") {
		t.Errorf("the error does not name the cause: %v", err)
	}
	if allocated > maxBuffered+decoderFixedBytes+uint64(len(img))*2 {
		t.Errorf("allocated %d MiB past a %d MiB bound", allocated>>20, maxBuffered>>20)
	}

	img, cluster := sharedCompressedQCOW2(t, 0, 128)
	got, st, allocated, err := decodeGenerated(t, DecodeQCOW2, 512<<20, Options{MaxBuffered: maxBuffered}, func(w io.Writer) error {
		_, err := w.Write(img)
		return err
	})
	t.Logf("within a read: allocated %d MiB: %v", allocated>>20, err)
	if err != nil {
		t.Fatal(err)
	}
	if st.Compressed != 8192 {
		t.Errorf("%d compressed clusters decoded, want 8192", st.Compressed)
	}
	sameBytes(t, got, bytes.Repeat(cluster, 8192))
	if allocated > 512<<20/8 {
		t.Errorf("allocated %d MiB decoding 8192 compressed clusters", allocated>>20)
	}
}
