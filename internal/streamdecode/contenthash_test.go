package streamdecode

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/blkhash"
)

// The hashed sink keeps its sink's kind and digests the disk the sink
// ends up holding: data written over a zeroed disk (a vmdk zeroes it
// before its grains), and holes a plain sink is told of and never written.
func TestWithContentHashDigestsTheSinksDisk(t *testing.T) {
	const size = 2 << 20
	data := bytes.Repeat([]byte("guest data 0123456789abcdef"), size/27+1)[:size]
	want := func(disk []byte) blkhash.Digest {
		h := blkhash.New(0)
		_, _ = h.Write(disk)
		return h.Sum()
	}

	zs := memZeroSink{&memSink{t: t, b: make([]byte, size)}}
	sink, hs := WithContentHash(zs)
	z, ok := sink.(ZeroSink)
	require.True(t, ok, "a ZeroSink stays one")
	require.NoError(t, z.ZeroAt(0, size))
	_, err := sink.WriteAt(data[64<<10:1<<20], 64<<10)
	require.NoError(t, err)
	got, err := hs.Sum(size)
	require.NoError(t, err)
	assert.Equal(t, want(zs.b), got)

	plain := &memSink{t: t, b: make([]byte, size)}
	sink, hs = WithContentHash(plain)
	_, isZero := sink.(ZeroSink)
	assert.False(t, isZero, "a plain sink stays one")
	holes, ok := sink.(HoleSink)
	require.True(t, ok)
	_, err = sink.WriteAt(data[:1<<20], 0)
	require.NoError(t, err)
	holes.Hole(1<<20, 1<<20)
	got, err = hs.Sum(size)
	require.NoError(t, err)
	assert.Equal(t, want(plain.b), got)
}
