package format

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// openBytes opens b with Open and reads the whole image.
func openBytes(t *testing.T, b []byte) (*Image, []byte, error) {
	t.Helper()
	s, err := Open(context.Background(), bytes.NewReader(b), Options{})
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { s.Close() })
	got, err := io.ReadAll(s)
	return s, got, err
}

// skippableFrame is a zstd skippable frame with the given magic nibble.
func skippableFrame(nibble byte, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0x184d2a50|uint32(nibble&0xf))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

func zstdCompress(t *testing.T, tool string, data []byte) []byte {
	t.Helper()
	needTool(t, tool)
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	require.NoError(t, os.WriteFile(in, data, 0o644))
	run(t, tool, "-q", "-f", in, "-o", in+".zst")
	b, err := os.ReadFile(in + ".zst")
	require.NoError(t, err)
	return b
}

func TestPzstdOutputIsDecoded(t *testing.T) {
	data := variedContent(3<<20, 21)
	pz := zstdCompress(t, "pzstd", data)
	require.Equal(t, uint32(0x184d2a50), binary.LittleEndian.Uint32(pz)&0xfffffff0, "pzstd output should open with a skippable frame")
	s, got, err := openBytes(t, pz)
	require.NoError(t, err)
	assert.Equal(t, []Compression{Zstd}, s.Compressions)
	assert.Equal(t, Raw, s.Format)
	assert.True(t, bytes.Equal(data, got), "decoded pzstd output differs from the input")
}

func TestHandMadeSkippableFrames(t *testing.T) {
	data := variedContent(1<<20, 22)
	plain := zstdCompress(t, "zstd", data)
	// Two skippable frames, one with a payload, before the real frame; the
	// payload looks like a qcow2 header to make sure it is not sniffed.
	stream := append(skippableFrame(0x0, []byte("QFI\xfb junk")), skippableFrame(0xf, nil)...)
	stream = append(stream, plain...)
	s, got, err := openBytes(t, stream)
	require.NoError(t, err)
	assert.Equal(t, []Compression{Zstd}, s.Compressions)
	assert.True(t, bytes.Equal(data, got))

	// A raw disk that only happens to start with the magic stays raw.
	raw := append(skippableFrame(0x3, make([]byte, 16)), bytes.Repeat([]byte{0x55}, 4096)...)
	c, f := Sniff(raw)
	assert.Equal(t, None, c)
	assert.Equal(t, Raw, f)
}

func TestEmptySourceRefused(t *testing.T) {
	cases := map[string][]byte{"plain": {}}
	for _, tool := range []string{"zstd", "pzstd", "gzip", "xz"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		dir := t.TempDir()
		in := filepath.Join(dir, "empty")
		require.NoError(t, os.WriteFile(in, nil, 0o644))
		out, err := exec.Command(tool, "-c", in).Output()
		require.NoError(t, err, tool)
		cases[tool] = out
	}
	cases["skippable only"] = skippableFrame(0, []byte("nothing"))
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Open(context.Background(), bytes.NewReader(b), Options{})
			require.ErrorIs(t, err, errdefs.ErrInvalidImage)
			assert.Contains(t, err.Error(), "the source is empty")
		})
	}
}

func TestForeignFormatsRefusedByName(t *testing.T) {
	cases := map[string]Format{
		"ostest/standard.qed":       QED,
		"qemu/parallels-v1":         Parallels,
		"qemu/parallels-v2":         Parallels,
		"dissect/expanding.hds":     Parallels,
		"qemu/empty.bochs":          Bochs,
		"qemu/simple-pattern.cloop": Cloop,
		"tsk/image.qcow":            QCOW1,
		"dissect/sesparse.vmdk":     VMDKSESparse,
	}
	for rel, want := range cases {
		t.Run(rel, func(t *testing.T) {
			b := testimg.SharedImageBytes(t, rel)
			_, f := Sniff(b[:min(len(b), DefaultPeekSize)])
			assert.Equal(t, want, f)
			_, _, err := openBytes(t, b)
			require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
			assert.Contains(t, err.Error(), "Invalid format "+string(want)+" for image")
		})
	}
	t.Run("vmdk COWD", func(t *testing.T) {
		head := append([]byte("COWD"), make([]byte, 2044)...)
		_, f := Sniff(head)
		assert.Equal(t, VMDKCOWD, f)
		_, _, err := openBytes(t, head)
		require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
	})
	t.Run("plain parallels is raw", func(t *testing.T) {
		b := testimg.SharedImageBytes(t, "dissect/plain.hds")
		_, f := Sniff(b[:DefaultPeekSize])
		assert.Equal(t, Raw, f)
	})
}

func TestLUKSRefused(t *testing.T) {
	needTool(t, "qemu-img")
	p := filepath.Join(t.TempDir(), "disk.luks")
	testimg.LUKS(t, p)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	_, _, err = openBytes(t, b)
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
	assert.Contains(t, err.Error(), "Invalid format luks for image")
}

func TestDMGTrailer(t *testing.T) {
	b := testimg.SharedImageBytes(t, "qemu/simple-dmg.dmg")
	_, f := Sniff(b[:min(len(b), DefaultPeekSize)])
	assert.Equal(t, Raw, f, "a DMG shows nothing at its head")
	tail := b[len(b)-DMGTrailerLen:]
	assert.True(t, IsDMGTrailer(tail))
	err := CheckTrailer(tail)
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
	assert.Contains(t, err.Error(), "Invalid format dmg for image")
	assert.NoError(t, CheckTrailer(make([]byte, DMGTrailerLen)))
	assert.NoError(t, CheckTrailer(b[len(b)-DMGTrailerLen-1:len(b)-1]), "koly one byte early is not a trailer")
	_, err = CheckRawEnd(tail, int64(len(b)-DMGTrailerLen))
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat, "a raw image ending in a DMG trailer is refused")
	_, err = RawDiskSize(bytes.NewReader(b), int64(len(b)))
	require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
}

func TestISOWithQCOW2HeaderRefused(t *testing.T) {
	b := testimg.SharedImageBytes(t, "ostest/iso-with-qcow2-in-system.iso")
	_, _, err := openBytes(t, b)
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	assert.Contains(t, err.Error(), "more than one format (qcow2, iso)")

	// A plain ISO still opens.
	iso := testimg.SharedImageBytes(t, "ostest/standard-iso9660.iso")
	s, _, err := openBytes(t, iso)
	require.NoError(t, err)
	assert.Equal(t, ISO, s.Format)
}

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

const htmlPage = "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1><p>The requested URL was not found on this server.</p></body></html>\n"

func TestTextRefused(t *testing.T) {
	utf8Page := strings.Repeat("Überschrift — ein Absatz mit Umlauten äöü, 日本語のテキスト。\n", 40)
	cases := []struct {
		name, body string
		o          Options
		message    string
	}{
		{"html from a server", htmlPage, Options{FromServer: true},
			`the server returned a text page, not a disk image; it begins "<!DOCTYPE html>"`},
		{"html with its content type", htmlPage, Options{FromServer: true, ContentType: "text/html; charset=utf-8"},
			"the server returned a text page (Content-Type text/html; charset=utf-8), not a disk image"},
		{"a text file", "just some notes\r\n\tindented\n", Options{}, `the source is text, not a disk image; it begins "just some notes"`},
		// Multi-byte characters, one of them cut at the KiB's end.
		{"utf-8 text", utf8Page, Options{}, "the source is text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(context.Background(), strings.NewReader(c.body), c.o)
			require.ErrorIs(t, err, errdefs.ErrTextNotImage)
			require.ErrorIs(t, err, errdefs.ErrUnsupportedFormat)
			assert.Contains(t, err.Error(), c.message)
			assert.NotContains(t, err.Error(), "--format-in", "a library error names no switch of the command line's")

			s, err := Open(context.Background(), strings.NewReader(c.body), Options{ForceRaw: true})
			require.NoError(t, err)
			got, err := io.ReadAll(s)
			require.NoError(t, err)
			assert.Equal(t, c.body, string(got))
			require.NoError(t, s.Close())
		})
	}
	// A compressed text is text once decompressed.
	_, _, err := openBytes(t, gzipBytes(t, []byte(htmlPage)))
	require.ErrorIs(t, err, errdefs.ErrTextNotImage)
	assert.Contains(t, err.Error(), "(once gzip is removed)")
}

// A text Content-Type refuses a body without a NUL byte in its first KiB
// (a Latin-1 page, a page with stray control characters); a disk served
// as text (a .vhd as text/x-vhdl) or a compression served as text/plain
// is still a disk.
func TestTextContentType(t *testing.T) {
	latin1 := []byte("<html><body>Caf\xe9 ferm\xe9\x01 \x7f</body></html>")
	require.False(t, looksLikeText(latin1))
	_, err := Open(context.Background(), bytes.NewReader(latin1), Options{FromServer: true, ContentType: "text/html; charset=iso-8859-1"})
	require.ErrorIs(t, err, errdefs.ErrTextNotImage)
	binary := variedContent(64<<10, 9)
	binary[100] = 0
	s, err := Open(context.Background(), bytes.NewReader(binary), Options{FromServer: true, ContentType: "text/x-vhdl"})
	require.NoError(t, err)
	s.Close()
	s, err = Open(context.Background(), bytes.NewReader(gzipBytes(t, binary)), Options{FromServer: true, ContentType: "text/plain"})
	require.NoError(t, err)
	assert.Equal(t, []Compression{Gzip}, s.Compressions)
	s.Close()
	qcow := readFile(t, convert(t, writeTemp(t, binary), t.TempDir(), "d.qcow2", "qcow2"))
	s, err = Open(context.Background(), bytes.NewReader(qcow), Options{FromServer: true, ContentType: "text/html"})
	require.NoError(t, err)
	assert.Equal(t, QCOW2, s.Format)
	s.Close()
}

// No real disk image is taken for text: every image of the shared corpus
// (ISOs, raw disks, boot sectors, every container format) is opened, and
// none is refused as text; the raw and ISO ones are not text by the probe.
func TestRealImagesAreNotText(t *testing.T) {
	root := testimg.RealImages()
	files, _ := filepath.Glob(filepath.Join(root, "*", "*.xz"))
	if len(files) == 0 {
		t.Skip("shared real images not available")
	}
	rawOrISO := 0
	for _, f := range files {
		b, err := exec.Command("xz", "-dc", f).Output()
		require.NoError(t, err, f)
		s, err := Open(context.Background(), bytes.NewReader(b), Options{FromServer: true})
		require.False(t, errors.Is(err, errdefs.ErrTextNotImage), "%s refused as text: %v", f, err)
		if err != nil {
			continue
		}
		if s.Format == Raw || s.Format == ISO {
			rawOrISO++
			assert.False(t, looksLikeText(b), f)
		}
		s.Close()
	}
	assert.GreaterOrEqual(t, rawOrISO, 6, "raw and iso images seen")
}

func writeTemp(t *testing.T, b []byte) string {
	p := filepath.Join(t.TempDir(), "disk.raw")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

func readFile(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}
