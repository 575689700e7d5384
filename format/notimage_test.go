package format

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testimg"
)

// toolOutput runs a compressor or archiver over a file holding content in a
// fresh directory and returns the file it wrote; skipped when the tool is
// missing.
func toolOutput(t *testing.T, content []byte, out string, name string, args ...string) []byte {
	t.Helper()
	needTool(t, name)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "disk.raw"), content, 0o644))
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, b)
	b, err = os.ReadFile(filepath.Join(dir, out))
	require.NoError(t, err)
	return b
}

func TestCompressionsAndArchivesRefusedByName(t *testing.T) {
	disk := variedContent(1<<20, 3)
	cases := []struct {
		name    string
		file    func(t *testing.T) []byte
		kind    error
		message string
	}{
		{"bzip2", func(t *testing.T) []byte { return toolOutput(t, disk, "disk.raw.bz2", "bzip2", "-k", "disk.raw") },
			errdefs.ErrCompressedFile, "a bzip2 file, not a disk image (decompress it first)"},
		// The frame format is decoded (TestOpenRoundTrip); the legacy one,
		// the kernel's, is not.
		{"lz4 legacy", func(t *testing.T) []byte {
			return toolOutput(t, disk, "disk.raw.lz4", "lz4", "-q", "-l", "disk.raw", "disk.raw.lz4")
		},
			errdefs.ErrCompressedFile, "an lz4 file (legacy format), not a disk image (decompress it first)"},
		{"zip", func(t *testing.T) []byte { return testimg.Zip(t, "disk.raw", disk) },
			errdefs.ErrArchiveFile, "a zip archive, not a disk image (extract the disk image from it first)"},
		{"ar", func(t *testing.T) []byte { return toolOutput(t, disk, "disk.a", "ar", "rc", "disk.a", "disk.raw") },
			errdefs.ErrArchiveFile, "an ar archive"},
		// No 7z, rar, lzip or cab tool here: their signatures, as their
		// formats define them, before a disk's bytes.
		{"7z", func(t *testing.T) []byte { return append([]byte("7z\xbc\xaf\x27\x1c\x00\x04"), disk...) },
			errdefs.ErrArchiveFile, "a 7z archive"},
		{"rar4", func(t *testing.T) []byte { return append([]byte("Rar!\x1a\x07\x00"), disk...) },
			errdefs.ErrArchiveFile, "a rar archive"},
		{"rar5", func(t *testing.T) []byte { return append([]byte("Rar!\x1a\x07\x01\x00"), disk...) },
			errdefs.ErrArchiveFile, "a rar archive"},
		{"lzip", func(t *testing.T) []byte { return append([]byte("LZIP\x01\x0c"), disk...) },
			errdefs.ErrCompressedFile, "an lzip file"},
		{"lzma", func(t *testing.T) []byte {
			return toolOutput(t, disk, "disk.raw.lzma", "xz", "-k", "--format=lzma", "disk.raw")
		},
			errdefs.ErrCompressedFile, "an lzma file"},
		{"cpio", func(t *testing.T) []byte { return append([]byte("0707010000000100"), disk...) },
			errdefs.ErrArchiveFile, "a cpio archive"},
		{"EnCase", func(t *testing.T) []byte { return append([]byte("EVF\x09\x0d\x0a\xff\x00\x01\x01\x00\x00"), disk...) },
			errdefs.ErrArchiveFile, "an EnCase (EWF) evidence file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.file(t)
			_, _, err := openBytes(t, b)
			require.ErrorIs(t, err, c.kind)
			require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
			assert.Contains(t, err.Error(), c.message)
			// Inside a gzip layer too.
			_, _, err = openBytes(t, gzipBytes(t, b))
			require.ErrorIs(t, err, c.kind)
			// Forced raw, the bytes are the disk.
			s, err := Open(context.Background(), bytes.NewReader(b), Options{ForceRaw: true})
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, Raw, s.Format)
		})
	}
}

// A raw disk whose first bytes happen to start like a two-byte magic is
// still a disk: the byte after the magic is checked.
func TestLookalikeHeadsStayRaw(t *testing.T) {
	for _, head := range [][]byte{
		[]byte("BZh9\x00\x00\x00\x00\x00\x00"), // no block magic after BZh9
		{0x1f, 0x9d, 0x7f},                     // compress flags with reserved bits set
		{0x5d, 0x00, 0x00, 0x01, 0x23},         // a dictionary size no lzma writer uses
		[]byte("070708zzzzzz"),
	} {
		b := append(append([]byte(nil), head...), variedContent(64<<10, 5)...)
		s, _, err := openBytes(t, b)
		require.NoError(t, err, "%q", head)
		assert.Equal(t, Raw, s.Format)
	}
}

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return run(t, "gzip", "-c", "-1", p)
}
