package iostage

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

func TestParseChecksum(t *testing.T) {
	c, err := ParseChecksum("SHA256:B94D27B9934D3E08A52E52D7DA7DABFAC484EFE37A5380EE9088F7ACE2EFCDE9")
	require.NoError(t, err)
	assert.Equal(t, "sha256", c.Algorithm)
	assert.Equal(t, "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9", c.Hex)
	for _, bad := range []string{"", "sha256", "sha256:abc:123", "crc32:12345678", "md5:xyz", "sha1:" + string(bytes.Repeat([]byte("a"), 39))} {
		_, err := ParseChecksum(bad)
		assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, bad)
	}
}

func TestVerifier(t *testing.T) {
	sha, _ := ParseChecksum("sha256:b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9")
	md, _ := ParseChecksum("md5:5eb63bbbe01eeed093cb22bb8f5acdc3")
	v := NewVerifier([]Checksum{sha, md})
	_, _ = io.Copy(io.Discard, io.TeeReader(bytes.NewReader([]byte("hello world")), v))
	got, err := v.Verify()
	require.NoError(t, err)
	assert.Len(t, got, 2)

	v = NewVerifier([]Checksum{sha})
	_, _ = v.Write([]byte("hello World"))
	_, err = v.Verify()
	require.ErrorIs(t, err, errdefs.ErrChecksumMismatch)
	assert.Contains(t, err.Error(), "checksum mismatch")

	var none *Verifier = NewVerifier(nil)
	_, _ = none.Write([]byte("x"))
	got, err = none.Verify()
	assert.NoError(t, err)
	assert.Nil(t, got)
}

func TestTailHolder(t *testing.T) {
	data := make([]byte, 100_000)
	_, _ = rand.Read(data)
	for _, size := range []int{0, 1, 511, 512, 513, 4096, len(data)} {
		for _, readSize := range []int{1, 100, 512, 513, 8192, 1 << 20} {
			src := iotest.HalfReader(bytes.NewReader(data[:size]))
			th := NewTailHolder(src, 512)
			var out bytes.Buffer
			buf := make([]byte, readSize)
			for {
				n, err := th.Read(buf)
				out.Write(buf[:n])
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
			}
			keep := min(size, 512)
			assert.True(t, bytes.Equal(data[:size-keep], out.Bytes()), "size %d read %d", size, readSize)
			assert.True(t, bytes.Equal(data[size-keep:size], th.Tail()), "size %d read %d", size, readSize)
		}
	}
}

func TestTailHolderPassesErrors(t *testing.T) {
	boom := errors.New("boom")
	th := NewTailHolder(io.MultiReader(bytes.NewReader(make([]byte, 2000)), iotest.ErrReader(boom)), 512)
	_, err := io.Copy(io.Discard, th)
	assert.ErrorIs(t, err, boom)
}

func TestCounter(t *testing.T) {
	c := NewCounter(bytes.NewReader(make([]byte, 12345)))
	n, err := io.Copy(io.Discard, c)
	require.NoError(t, err)
	assert.EqualValues(t, 12345, n)
	assert.EqualValues(t, 12345, c.Count())
}
