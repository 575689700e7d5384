package iostage_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/internal/iostage"
)

// emptyReader returns nothing, forever, without an error.
type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

func TestReadChunk(t *testing.T) {
	data := []byte("0123456789")
	buf := make([]byte, 4)

	n, eof, err := iostage.ReadChunk(iotest.OneByteReader(bytes.NewReader(data)), buf)
	assert.NoError(t, err)
	assert.False(t, eof)
	assert.Equal(t, 4, n)
	assert.Equal(t, "0123", string(buf))

	// A short last chunk ends the stream with a bare io.EOF.
	n, eof, err = iostage.ReadChunk(bytes.NewReader(data[:2]), buf)
	assert.NoError(t, err)
	assert.True(t, eof)
	assert.Equal(t, 2, n)

	// A truncated stream (ErrUnexpectedEOF, or a wrapped EOF) is the
	// source's failure, not an end.
	for _, cause := range []error{io.ErrUnexpectedEOF, fmt.Errorf("xz: %w", io.EOF)} {
		r := io.MultiReader(bytes.NewReader(data[:1]), iotest.ErrReader(cause))
		n, eof, err = iostage.ReadChunk(r, buf)
		assert.True(t, errors.Is(err, cause), "%v", err)
		assert.False(t, eof)
		assert.Equal(t, 1, n)
	}

	_, _, err = iostage.ReadChunk(emptyReader{}, buf)
	assert.ErrorIs(t, err, io.ErrNoProgress)
}
