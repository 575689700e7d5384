package testimg

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/blkhash"
)

// KeepWriting writes 4 KiB of random bytes somewhere in the first size
// bytes of path every 200 µs, as a running VM writes its disk, until
// the returned stop is called (it waits for the writer to end).
func KeepWriting(t testing.TB, path string, size int64) (stop func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer f.Close()
		for i := uint64(0); ; i++ {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Microsecond):
			}
			off := int64(i*7919%uint64(size/4096)) * 4096
			if _, err := f.WriteAt(RandomBytes(4096, 1000+i), off); err != nil {
				t.Error(err)
				return
			}
		}
	})
	return sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
}

// WriteRandomAt writes n random bytes at each offset of path (a file or a
// device), in place, and syncs; it returns how many 64 KiB blocks that
// changed (a delta pass's unit).
func WriteRandomAt(t testing.TB, path string, seed uint64, n int, offsets ...int64) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const block = blkhash.BlockSize
	blocks := map[int64]bool{}
	for i, off := range offsets {
		if _, err := f.WriteAt(RandomBytes(n, seed+uint64(i)), off); err != nil {
			t.Fatal(err)
		}
		for b := off / block; b <= (off+int64(n)-1)/block; b++ {
			blocks[b] = true
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return int64(len(blocks))
}

// CopyOnto copies the whole of src onto dst (a file it creates, or a
// device) and syncs: a target holding an earlier copy.
func CopyOnto(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Sync(); err != nil {
		t.Fatal(err)
	}
}

// ContentDigest is the blk-sha256 content digest of the file or device
// at path, as importer digest --content prints it; checked against blksum
// (built from nirs/blkhash) when it is on PATH.
func ContentDigest(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	d, err := blkhash.SumFile(context.Background(), f, size, 0)
	if err != nil {
		t.Fatal(err)
	}
	if blksum, err := exec.LookPath("blksum"); err == nil {
		out, err := exec.Command(blksum, path).Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(string(out))[0]; got != d.Hex() {
			t.Fatalf("blksum %s: %s, SumFile %s", path, got, d.Hex())
		}
	}
	return d.String()
}
