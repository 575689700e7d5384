package streamdecode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// lateImage is a qcow2 whose active L2 table comes after nearly all the
// data it maps: after a snapshot, a write copies the L2 table to the end
// of the file, and every older cluster it maps passed before it.
func lateImage(t *testing.T, dir string, keepSnapshot bool) string {
	t.Helper()
	testimg.Need(t, "qemu-img", "qemu-io")
	raw := rawDisk(t, filepath.Join(dir, "disk.raw"), 16<<20, 60, 21)
	c := qcow2Case{name: "late", post: [][]string{{"qemu-img", "snapshot", "-c", "s1", "IMG"}},
		io: []string{"write -P 0x42 1M 64k", "write -P 0x43 9M 192k"}}
	img := makeQCOW2(t, dir, raw, c)
	if !keepSnapshot {
		testimg.Run(t, "qemu-img", "snapshot", "-d", "s1", img)
	}
	return img
}

// openSpillFiles counts this process's open files that are spill files
// (unlinked, so only /proc still names them).
func openSpillFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(l, ".importer-spill-") {
			n++
		}
	}
	return n
}

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		t.Errorf("%s holds %d entries after the decode, first %s", dir, len(ents), ents[0].Name())
	}
	if n := openSpillFiles(t); n > 0 {
		t.Errorf("%d spill files still open after the decode", n)
	}
}

// TestSpill: with a 1 MiB buffer and a spill directory, an image whose
// tables come after its data decodes right; memory stays within the bound
// and the spill file is gone afterwards. Without the directory the same
// decode stops with a *BufferError.
func TestSpill(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := map[bool]string{false: "no-snapshot", true: "snapshot"}[keep]
		t.Run(name, func(t *testing.T) {
			img := lateImage(t, t.TempDir(), keep)
			want := reference(t, img, "qcow2")
			const bound = 1 << 20
			for _, zs := range []bool{false, true} {
				spillDir := t.TempDir()
				got, st, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), zs, Options{MaxBuffered: bound, SpillDir: spillDir})
				if err != nil {
					t.Fatalf("zeroSink=%v: %v", zs, err)
				}
				sameBytes(t, got, want)
				t.Logf("zeroSink=%v: buffered peak %d total %d, spilled %d (peak %d)", zs, st.PeakBuffered, st.BufferedBytes, st.SpilledBytes, st.PeakSpilled)
				if st.SpilledBytes < 4<<20 {
					t.Errorf("spilled %d bytes, want the data ahead of the late table (several MiB)", st.SpilledBytes)
				}
				if st.PeakBuffered > bound {
					t.Errorf("held %d bytes in memory, over the %d-byte bound", st.PeakBuffered, bound)
				}
				if st.PeakSpilled > st.SpilledBytes || st.PeakSpilled <= 0 {
					t.Errorf("peak spilled %d of %d", st.PeakSpilled, st.SpilledBytes)
				}
				emptyDir(t, spillDir)
			}
			_, _, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), false, Options{MaxBuffered: bound})
			var be *BufferError
			if !errors.As(err, &be) || !errors.Is(err, errdefs.ErrNotStreamable) {
				t.Fatalf("no spill directory: %v, want a *BufferError", err)
			}
			if be.Max != bound || be.Need <= bound {
				t.Errorf("BufferError %+v", be)
			}
		})
	}
}

// TestSpillNoSpillForInOrder: an image in table order needs no spill file
// even with a small bound and a spill directory.
func TestSpillNoSpillForInOrder(t *testing.T) {
	img, want := plainQCOW2(t, "plain", 16<<20, 60, 22)
	spillDir := t.TempDir()
	got, st, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), false, Options{MaxBuffered: 1 << 20, SpillDir: spillDir})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, want)
	if st.SpilledBytes != 0 {
		t.Errorf("spilled %d bytes of an image in order", st.SpilledBytes)
	}
	emptyDir(t, spillDir)
}

// TestSpillCleanupOnFailure: a stream cut after the spill began, a sink
// that fails and a cancelled context all leave no spill file open or in
// the directory.
func TestSpillCleanupOnFailure(t *testing.T) {
	img := lateImage(t, t.TempDir(), false)
	full, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	want := reference(t, img, "qcow2")
	o := func(dir string) Options { return Options{MaxBuffered: 1 << 20, SpillDir: dir} }

	t.Run("truncated", func(t *testing.T) {
		cut := filepath.Join(t.TempDir(), "cut.qcow2")
		if err := os.WriteFile(cut, full[:len(full)*3/4], 0o644); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		_, st, err := decodeFile(t, DecodeQCOW2, cut, int64(len(want)), false, o(dir))
		if !errors.Is(err, errdefs.ErrInvalidImage) {
			t.Errorf("cut stream: %v, want ErrInvalidImage", err)
		}
		if st.SpilledBytes == 0 {
			t.Errorf("nothing was spilled before the cut; the test proves nothing")
		}
		emptyDir(t, dir)
	})
	// decodeOnto decodes img onto sink with a spill directory of its own,
	// which it checks is empty afterwards.
	decodeOnto := func(t *testing.T, ctx context.Context, sink Sink) error {
		dir := t.TempDir()
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = DecodeQCOW2(ctx, f, sink, o(dir))
		emptyDir(t, dir)
		return err
	}
	t.Run("sink", func(t *testing.T) {
		s := &failingSink{}
		s.n.Store(int64(len(want)) / (64 << 10) / 2)
		if err := decodeOnto(t, context.Background(), s); !errors.Is(err, errSinkBroke) {
			t.Errorf("failing sink: %v", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := decodeOnto(t, ctx, &failingSink{cancel: cancel}); !errors.Is(err, errdefs.ErrCancelled) {
			t.Errorf("cancelled: %v", err)
		}
	})
	t.Run("unusable-dir", func(t *testing.T) {
		_, _, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), false, o(filepath.Join(t.TempDir(), "missing")))
		if !errors.Is(err, errdefs.ErrScratchSpaceRequired) {
			t.Errorf("missing spill directory: %v, want ErrScratchSpaceRequired", err)
		}
	})
}

// TestNothingHeldAfterLastTable: bytes after the last table (here 3 MiB of
// leaked clusters appended to the file) can be claimed by nothing, so they
// are not held: a 1 MiB bound without a spill directory suffices.
func TestNothingHeldAfterLastTable(t *testing.T) {
	img, want := plainQCOW2(t, "tail", 8<<20, 50, 23)
	f, err := os.OpenFile(img, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 3<<20)
	for i := range junk {
		junk[i] = byte(i*31 + 7)
	}
	if _, err := f.Write(junk); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, st, err := decodeFile(t, DecodeQCOW2, img, int64(len(want)), false, Options{MaxBuffered: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, got, want)
	if st.BufferedBytes >= int64(len(junk)) {
		t.Errorf("held %d bytes: the trailing junk was kept", st.BufferedBytes)
	}
}
