package streamdecode

import "github.com/diskimport/engine/internal/blkhash"

// HashedSink hands the decoder's guest writes to a blkhash.Assembler and
// to the target's sink: the block hashes run on other cores while the sink
// writes the same bytes, so the content digest costs no pass of its own.
// A write the Assembler cannot place leaves the digest unknown (Sum's
// error), never wrong, and the decode goes on.
type HashedSink struct {
	sink Sink
	hash *blkhash.Assembler
	err  error
}

func (s *HashedSink) WriteAt(p []byte, off int64) (int, error) {
	wait := func() {}
	if s.err == nil {
		w, err := s.hash.StartAt(p, off)
		if err != nil {
			s.err = err
		} else {
			wait = w
		}
	}
	n, err := s.sink.WriteAt(p, off)
	wait()
	return n, err
}

func (s *HashedSink) zeros(off, n int64) {
	if s.err == nil {
		s.err = s.hash.ZeroAt(off, n)
	}
}

// Sum is the digest of a disk of size bytes, once the decoder is done.
func (s *HashedSink) Sum(size int64) (blkhash.Digest, error) {
	if s.err != nil {
		return blkhash.Digest{}, s.err
	}
	return s.hash.Sum(size)
}

// PeakHeld is the most the Assembler held of blocks written in pieces.
func (s *HashedSink) PeakHeld() int64 { return s.hash.PeakHeld() }

// plainHashingSink is a HashedSink over a plain Sink (a new sparse file):
// the decoder tells it the zeros it does not write (HoleSink), so a block
// written in pieces around them is hashed and let go at once.
type plainHashingSink struct{ *HashedSink }

func (s plainHashingSink) Hole(off, n int64) { s.zeros(off, n) }

// zeroHashingSink is a HashedSink over a ZeroSink: the decoder reports
// zero ranges, which may undo earlier writes (a vmdk zeroes the whole
// target before its grains), so the Assembler hears of them too.
type zeroHashingSink struct {
	*HashedSink
	zero ZeroSink
}

func (s zeroHashingSink) ZeroAt(off, n int64) error {
	if err := s.zero.ZeroAt(off, n); err != nil {
		return err
	}
	s.zeros(off, n)
	return nil
}

// WithContentHash wraps sink so every guest write is hashed; it keeps
// sink's kind (a plain Sink stays one: what it never receives reads as
// zeros on the target and in the digest alike). Decode into the first
// result; the second gives the digest.
func WithContentHash(sink Sink) (Sink, *HashedSink) {
	hs := &HashedSink{sink: sink, hash: blkhash.NewAssembler(0)}
	if z, ok := sink.(ZeroSink); ok {
		return zeroHashingSink{HashedSink: hs, zero: z}, hs
	}
	return plainHashingSink{hs}, hs
}
