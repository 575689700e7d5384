package engine

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/nbdserver"
	"github.com/diskimport/engine/internal/streamdecode"
)

// recordContentDigest puts the digest of the guest-visible bytes written
// (internal/blkhash: the same for one disk in any container) into the
// result, and fails the attempt when Request.ExpectContentDigest names
// another one. The phases call it before Commit, so a mismatch aborts the
// target like any failure.
func (a *attempt) recordContentDigest(d blkhash.Digest) error {
	a.result.ContentDigest = d.String()
	if a.req.ExpectContentDigest == "" {
		a.log.Info("Content digest", "contentDigest", a.result.ContentDigest)
		return nil
	}
	if err := blkhash.Expect(d, a.req.ExpectContentDigest); err != nil {
		return fmt.Errorf("the image from %s: %w", a.req.Source, err)
	}
	a.log.Info("Content digest verified", "contentDigest", a.result.ContentDigest)
	return nil
}

// hashingSink hands the decoder's guest writes to an Assembler and to the
// target's sink: the block hashes run on other cores while the sink
// writes the same bytes. A write the Assembler cannot place leaves the
// digest unknown (err), never wrong, and the import goes on.
type hashingSink struct {
	sink streamdecode.Sink
	hash *blkhash.Assembler
	err  error
}

func (s *hashingSink) WriteAt(p []byte, off int64) (int, error) {
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

func (s *hashingSink) zeros(off, n int64) {
	if s.err == nil {
		s.err = s.hash.ZeroAt(off, n)
	}
}

// sum is the digest of a disk of size bytes, once the decoder is done.
func (s *hashingSink) sum(size int64) (blkhash.Digest, error) {
	if s.err != nil {
		return blkhash.Digest{}, s.err
	}
	return s.hash.Sum(size)
}

// plainHashingSink is a hashingSink over a plain Sink (a new sparse file):
// the decoder tells it the zeros it does not write (streamdecode.HoleSink),
// so a block written in pieces around them is hashed and let go at once.
type plainHashingSink struct{ *hashingSink }

func (s plainHashingSink) Hole(off, n int64) { s.zeros(off, n) }

// zeroHashingSink is a hashingSink over a ZeroSink: the decoder reports
// zero ranges, which may undo earlier writes (a vmdk zeroes the whole
// target before its grains), so the Assembler hears of them too.
type zeroHashingSink struct {
	*hashingSink
	zero streamdecode.ZeroSink
}

func (s zeroHashingSink) ZeroAt(off, n int64) error {
	if err := s.zero.ZeroAt(off, n); err != nil {
		return err
	}
	s.zeros(off, n)
	return nil
}

// withContentHash wraps sink so every guest write is hashed; it keeps
// sink's kind (a plain Sink stays one: what it never receives reads as
// zeros on the target and in the digest alike).
func withContentHash(sink streamdecode.Sink) (streamdecode.Sink, *hashingSink) {
	hs := &hashingSink{sink: sink, hash: blkhash.NewAssembler(0)}
	if z, ok := sink.(streamdecode.ZeroSink); ok {
		return zeroHashingSink{hashingSink: hs, zero: z}, hs
	}
	return plainHashingSink{hs}, hs
}

// takeContentDigest records d, or, when the digest could not be had
// (err), fails the import only if one was expected.
func (a *attempt) takeContentDigest(d blkhash.Digest, err error) error {
	if err != nil {
		if a.req.ExpectContentDigest != "" {
			return fmt.Errorf("content digest of %s: %w", a.target.Path(), err)
		}
		a.log.Warn("No content digest of the image written", "target", a.target.Path(), "err", err)
		return nil
	}
	return a.recordContentDigest(d)
}

// hashingExport is the writable NBD export of a block target with every
// write and zeroing qemu-img makes hashed on the way. Requests come
// concurrently: one at a time is hashed (on all cores) while the others
// write. A request the Assembler cannot place (qemu-img rewriting part of
// a block) leaves the digest unknown, never wrong, and the import goes on.
type hashingExport struct {
	nbdserver.WritableExport
	mu   sync.Mutex
	hash *blkhash.Assembler
	err  error
}

func newHashingExport(e nbdserver.WritableExport) *hashingExport {
	return &hashingExport{WritableExport: e, hash: blkhash.NewAssembler(0)}
}

func (h *hashingExport) WriteAt(p []byte, off int64) (int, error) {
	h.mu.Lock()
	if h.err == nil {
		_, h.err = h.hash.WriteAt(p, off)
	}
	h.mu.Unlock()
	return h.WritableExport.WriteAt(p, off)
}

func (h *hashingExport) ZeroAt(off, n int64, mayDeallocate, fast bool) error {
	if err := h.WritableExport.ZeroAt(off, n, mayDeallocate, fast); err != nil {
		return err // a fast zero refused: qemu-img writes the zeros instead
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = h.hash.ZeroAt(off, n)
	}
	return nil
}

// sum is the digest of the first size bytes, once qemu-img is done.
func (h *hashingExport) sum(size int64) (blkhash.Digest, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return blkhash.Digest{}, h.err
	}
	return h.hash.Sum(size)
}

// convertedContentDigest records the content digest of what qemu-img
// wrote: from the export's hashes on a block target, read back from a raw
// file target (its holes skipped: only the data qemu-img wrote is read;
// the 2 GiB bench disk as a sparse vmdk onto a file, 820 MB of data, cost
// 0.45 s of user and 0.6 s of system CPU more). A qcow2 file target gets
// none. A digest that cannot be had fails the import only when one was
// expected.
func (a *attempt) convertedContentDigest(ctx context.Context, dev *targetExport) error {
	var (
		d   blkhash.Digest
		err error
	)
	switch {
	case dev != nil:
		d, err = dev.hash.sum(a.result.VirtualSize)
	case a.plan.OutputFormat == "raw":
		var f *os.File
		if f, err = os.Open(a.target.WritePath()); err == nil {
			d, err = blkhash.SumFile(ctx, f, a.result.VirtualSize, 0)
			f.Close()
		}
	default:
		err = fmt.Errorf("a %s target has no content digest: %w", a.plan.OutputFormat, errdefs.ErrInvalidOptions)
	}
	return a.takeContentDigest(d, err)
}
