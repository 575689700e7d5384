package datasource_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
)

// testImage returns size bytes (a multiple of 4096) of varied content:
// random blocks, text and zero holes, from a fixed seed.
func testImage(t *testing.T, size int) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(size), 42))
	buf := make([]byte, 0, size)
	text := []byte("The quick brown fox jumps over the lazy dog. 0123456789\n")
	for len(buf) < size {
		blk := make([]byte, 4096)
		switch (len(buf) / 4096) % 3 {
		case 0:
			for i := range blk {
				blk[i] = byte(r.Uint32())
			}
		case 1:
			for i := range blk {
				blk[i] = text[i%len(text)]
			}
		case 2: // zero hole
		}
		buf = append(buf, blk...)
	}
	return buf[:size]
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.raw")
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// readAll opens src and reads the whole stream, closing the body.
func readAll(t *testing.T, src datasource.Source) (*datasource.Transfer, []byte, error) {
	t.Helper()
	st, err := src.Open(context.Background())
	if err != nil {
		return nil, nil, err
	}
	defer st.Body.Close()
	var out bytes.Buffer
	_, err = io.Copy(&out, st.Body)
	return st, out.Bytes(), err
}

// requireContent reads src whole and checks that it delivered want (by
// digest).
func requireContent(t *testing.T, src datasource.Source, want []byte) {
	t.Helper()
	_, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(want), sum(got))
}
