package format

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// readDisk reads the disk in stream b through a RawDiskReader, with reads
// of chunk bytes.
func readDisk(t *testing.T, b []byte, chunk int) ([]byte, bool, error) {
	t.Helper()
	d := NewRawDiskReader(bytes.NewReader(b))
	var out []byte
	buf := make([]byte, chunk)
	for {
		n, err := d.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, d.FooterLeftOut(), nil
		}
		if err != nil {
			return out, d.FooterLeftOut(), err
		}
	}
}

// A fixed VHD's footer is left out of the disk, data ending in anything
// else is all disk (a stream shorter than a footer too), whatever the
// size of the reads.
func TestRawDiskReaderLeavesOutAFixedVHDFooter(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	content := variedContent(3<<20, 7)
	writeRaw(t, raw, content)
	vhd, err := os.ReadFile(convert(t, raw, dir, "fixed.vhd", "vpc", "subformat=fixed"))
	require.NoError(t, err)
	dataLen := len(vhd) - FixedVHDFooterLen
	for _, chunk := range []int{100, 512, 4096, 1 << 20} {
		got, footer, err := readDisk(t, vhd, chunk)
		require.NoError(t, err)
		assert.True(t, footer, "chunk %d", chunk)
		assert.True(t, bytes.Equal(vhd[:dataLen], got), "chunk %d: the disk of a fixed VHD is its data", chunk)

		got, footer, err = readDisk(t, content, chunk)
		require.NoError(t, err)
		assert.False(t, footer, "chunk %d", chunk)
		assert.True(t, bytes.Equal(content, got), "chunk %d: a raw image is all disk", chunk)
	}
	short := []byte("a stream shorter than a footer")
	got, footer, err := readDisk(t, short, 4096)
	require.NoError(t, err)
	assert.False(t, footer)
	assert.Equal(t, short, got)
}

// A stream ending in a DMG's trailer fails at its end, and keeps failing;
// a read error of the stream is passed on.
func TestRawDiskReaderRefusesADMG(t *testing.T) {
	b := testimg.SharedImageBytes(t, "qemu/simple-dmg.dmg")
	_, _, err := readDisk(t, b, 1<<20)
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
	d := NewRawDiskReader(bytes.NewReader(b))
	_, err = io.Copy(io.Discard, d)
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
	_, err = d.Read(make([]byte, 4096))
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat, "a second read after the refusal")

	broken := NewRawDiskReader(iotest.TimeoutReader(bytes.NewReader(make([]byte, 8192))))
	_, err = io.ReadAll(broken)
	require.ErrorIs(t, err, iotest.ErrTimeout)
}
