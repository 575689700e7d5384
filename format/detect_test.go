package format

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testimg"
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
