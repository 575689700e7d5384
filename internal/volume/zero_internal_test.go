//go:build linux

package volume

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestZeroMethods forces each way of the Zeroer on a loop device full of
// old data and checks the runs read back as zeros.
func TestZeroMethods(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices")
	}
	const size = 12 << 20
	for _, way := range []struct {
		name    string
		noPunch bool
		keeping int32
	}{
		{"punch a hole", false, keepByIoctl},
		{"BLKZEROOUT", true, keepByIoctl},
		{"fallocate(ZERO_RANGE)", true, keepByFallocate},
		{"written zeros", true, keepByWriting},
	} {
		backing := filepath.Join(t.TempDir(), "b.img")
		require.NoError(t, os.WriteFile(backing, bytes.Repeat([]byte{0x5A}, size), 0o600))
		dev := testimg.AttachLoop(t, backing, "--direct-io=on")

		img := bytes.Repeat([]byte("data"), size/4-1000) // ends 4000 bytes short of the device
		clear(img[0:4096])
		clear(img[3<<20 : 9<<20+100])
		clear(img[len(img)-1500:])
		tg, err := Open(context.Background(), Options{Path: dev})
		require.NoError(t, err)
		w, err := tg.NewWriter()
		require.NoError(t, err)
		w.zero.noPunch.Store(way.noPunch)
		w.zero.keeping.Store(way.keeping)
		_, err = w.ReadFrom(io.MultiReader(bytes.NewReader(img)))
		require.NoError(t, err)
		_, err = w.Finish()
		require.NoError(t, err)
		require.NoError(t, tg.Commit(context.Background()))
		require.NoError(t, tg.Close())

		f, err := os.Open(dev)
		require.NoError(t, err)
		require.NoError(t, unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0))
		got := make([]byte, size)
		_, err = f.ReadAt(got, 0)
		f.Close()
		require.NoError(t, err)
		require.True(t, bytes.Equal(img, got[:len(img)]), "%s: content differs", way.name)
		require.True(t, bytes.Equal(bytes.Repeat([]byte{0x5A}, size-len(img)), got[len(img):]), "%s: past the end changed", way.name)
	}
}
