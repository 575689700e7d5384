package cloner

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/buffers"
)

// A source read with O_DIRECT (ext4 takes it) gives its bytes as a
// buffered read would, its last chunk included where the size is no
// multiple of the alignment; a source reopened buffered reads the same.
func TestSourceFileReadsEveryByteDirectOrNot(t *testing.T) {
	want := make([]byte, 5*directAlign+1234)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(path, want, 0o600))
	for _, direct := range []bool{true, false} {
		s, err := openSourceFile(path)
		require.NoError(t, err)
		if !direct {
			s.refused.Store(true)
		} else if s.direct == nil {
			s.Close()
			t.Log("O_DIRECT not taken here; the direct case is the buffered one")
			continue
		}
		var got []byte
		buf := buffers.Aligned(2*directAlign, directAlign)
		for off := int64(0); off < s.size; {
			n, err := s.readAt(buf, off)
			require.NoError(t, err)
			require.Positive(t, n)
			got = append(got, buf[:n]...)
			off += int64(n)
		}
		s.Close()
		assert.True(t, bytes.Equal(want, got), "direct=%v: %d bytes read of %d", direct, len(got), len(want))
	}
}
