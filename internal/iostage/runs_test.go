package iostage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptedRuns is a RunReader of pieces: data (given at most len(p) at a
// time) or, where data is nil, zeros (given as one run).
type scriptedRuns struct {
	pieces []scriptedPiece
}

type scriptedPiece struct {
	data  []byte
	zeros int64
}

func (s *scriptedRuns) ReadRun(p []byte) (int, int64, error) {
	if len(s.pieces) == 0 {
		return 0, 0, io.EOF
	}
	piece := &s.pieces[0]
	if piece.data == nil {
		s.pieces = s.pieces[1:]
		return 0, piece.zeros, nil
	}
	n := copy(p, piece.data)
	if piece.data = piece.data[n:]; len(piece.data) == 0 {
		s.pieces = s.pieces[1:]
	}
	return n, 0, nil
}

func (s *scriptedRuns) Read(p []byte) (int, error) {
	panic("a RunReader's Read was called where ReadRun was due")
}

func (s *scriptedRuns) KnowsRuns() bool { return true }

// randomPieces is a stream of data pieces and zero runs, some shorter
// than the 512 bytes a TailHolder holds, some longer, and the bytes it
// stands for.
func randomPieces(rng *rand.Rand, count int) ([]scriptedPiece, []byte) {
	var pieces []scriptedPiece
	var whole []byte
	for range count {
		n := []int{1, 100, 511, 512, 513, 4096, 70_000}[rng.IntN(7)]
		if rng.IntN(2) == 0 {
			pieces = append(pieces, scriptedPiece{zeros: int64(n)})
			whole = append(whole, make([]byte, n)...)
			continue
		}
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(1 + rng.IntN(255))
		}
		pieces = append(pieces, scriptedPiece{data: data})
		whole = append(whole, data...)
	}
	return pieces, whole
}

// A TailHolder over a stream of runs passes on all but its last n bytes,
// as over the bytes, whether read by ReadRun (long runs going on as
// runs) or by Read, in any sizes, and holds those last bytes back.
func TestTailHolderPassesRunsOnAndHoldsTheirEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 200 {
		pieces, whole := randomPieces(rng, 1+rng.IntN(8))
		readSize := []int{1, 512, 513, 8192, 1 << 20}[round%5]
		byRun := round%2 == 0
		t.Run(fmt.Sprintf("%d", round), func(t *testing.T) {
			th := NewTailHolder(&scriptedRuns{pieces: pieces}, 512)
			require.True(t, th.KnowsRuns())
			var out []byte
			runs := 0
			buf := make([]byte, readSize)
			for {
				var n int
				var zeros int64
				var err error
				if byRun {
					n, zeros, err = th.ReadRun(buf)
				} else {
					n, err = th.Read(buf)
				}
				if zeros > 0 {
					require.Zero(t, n)
					runs++
					out = append(out, make([]byte, zeros)...)
				}
				out = append(out, buf[:n]...)
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				// Mixing the two stays right too.
				if rng.IntN(4) == 0 {
					byRun = !byRun
				}
			}
			keep := min(len(whole), 512)
			require.True(t, bytes.Equal(whole[:len(whole)-keep], out), "passed on %d bytes of %d", len(out), len(whole)-keep)
			require.True(t, bytes.Equal(whole[len(whole)-keep:], th.Tail()), "the held end")
		})
	}
}

// A run longer than the held window goes on as a run, not as bytes.
func TestTailHolderGivesALongRunAsARun(t *testing.T) {
	data := bytes.Repeat([]byte{7}, 1000)
	th := NewTailHolder(&scriptedRuns{pieces: []scriptedPiece{{data: data}, {zeros: 1 << 20}, {data: data}}}, 512)
	buf := make([]byte, 1<<16)
	n, zeros, err := th.ReadRun(buf)
	require.NoError(t, err)
	assert.Equal(t, 488, n, "the data less what the window held")
	assert.Zero(t, zeros)
	assert.Equal(t, data[:488], buf[:n])
	n, zeros, err = th.ReadRun(buf)
	require.NoError(t, err)
	assert.Equal(t, 512, n, "the held bytes, before the run")
	assert.Zero(t, zeros)
	assert.Equal(t, data[488:], buf[:n])
	n, zeros, err = th.ReadRun(buf)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.EqualValues(t, 1<<20-512, zeros, "the run but for its end, held")
}

// ReadRun of a plain reader is its Read; KnowsRuns is false for it.
func TestReadRunOfAPlainReaderIsItsRead(t *testing.T) {
	r := bytes.NewReader([]byte("abc"))
	assert.False(t, KnowsRuns(r))
	buf := make([]byte, 8)
	n, zeros, err := ReadRun(r, buf)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Zero(t, zeros)
	assert.False(t, NewTailHolder(r, 512).KnowsRuns())
}

// FuzzTailHolderRuns: whatever runs and data a stream gives, and whatever
// sizes it is read in, a TailHolder passes on its bytes but the last 512
// and holds those.
func FuzzTailHolderRuns(f *testing.F) {
	f.Add([]byte{0x81, 0x02, 0x05, 0x90, 0x10}, uint16(600))
	f.Add([]byte{0x01, 0xff, 0x80}, uint16(513))
	f.Fuzz(func(t *testing.T, script []byte, readSize uint16) {
		// Each byte is a piece: the high bit a run of zeros, else data;
		// the rest its length in units of 37 bytes (odd, so pieces fall
		// off every boundary).
		var pieces []scriptedPiece
		var whole []byte
		for i, b := range script {
			n := int(b&0x7f)*37 + 1
			if b&0x80 != 0 {
				pieces = append(pieces, scriptedPiece{zeros: int64(n)})
				whole = append(whole, make([]byte, n)...)
				continue
			}
			data := bytes.Repeat([]byte{byte(i%255) + 1}, n)
			pieces = append(pieces, scriptedPiece{data: data})
			whole = append(whole, data...)
		}
		th := NewTailHolder(&scriptedRuns{pieces: pieces}, 512)
		buf := make([]byte, int(readSize)%4096+1)
		var out []byte
		for i := 0; ; i++ {
			var n int
			var zeros int64
			var err error
			if i%3 == 2 {
				n, err = th.Read(buf)
			} else {
				n, zeros, err = th.ReadRun(buf)
			}
			out = append(out, make([]byte, zeros)...)
			out = append(out, buf[:n]...)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			require.LessOrEqual(t, len(out), len(whole))
		}
		keep := min(len(whole), 512)
		require.True(t, bytes.Equal(whole[:len(whole)-keep], out), "passed on %d bytes of %d", len(out), len(whole)-keep)
		require.True(t, bytes.Equal(whole[len(whole)-keep:], th.Tail()))
	})
}
