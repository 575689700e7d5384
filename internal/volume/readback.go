//go:build linux

package volume

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/ctxio"
	"github.com/diskimport/engine/internal/iostage"
)

// ReadBackSHA256 is the SHA-256 ("sha256:hex") of the first n bytes of
// path, read after flushing it and dropping its cached pages, so the bytes
// come from the device or disk and not from the page cache the copy
// filled: what a read-back verification compares.
func ReadBackSHA256(ctx context.Context, path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := unix.Fsync(int(f.Fd())); err != nil {
		return "", fmt.Errorf("fsync %s: %w", path, err)
	}
	// Advisory: a kernel that keeps the pages only makes the check weaker.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return iostage.SHA256Prefix(ctxio.NewReader(ctx, "", f), n)
}
