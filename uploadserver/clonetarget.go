package uploadserver

import (
	"context"
	"fmt"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/volume"
)

// zeroBlock feeds zero runs to the sparse writer, which turns them into
// holes (or device zeroing) rather than writes.
var zeroBlock = make([]byte, 1<<20)

// rawClone writes a clone's raw bytes to the target: the import's sparse
// writer, its size rules, a sha256 of every byte in order, and the
// target's commit (fsync) at the end.
type rawClone struct {
	opts    importer.Options
	tgt     *volume.Target
	w       *volume.Writer
	content *blkhash.Hash // the content digest of the bytes written
	sum     *cloner.Digest
	final   string            // the digest, once taken
	check   *iostage.Verifier // the import's Checksums over the source's bytes; nil: none
	offset  int64             // bytes accepted, in source order
	size    int64             // the source's size when known, else -1
	started time.Time
}

// openRawClone opens the target and, when the source size is known,
// refuses a target that cannot hold it (or, with ExactSize, is not that
// size) before a byte is written. ctx bounds every write.
func openRawClone(ctx context.Context, o importer.Options, size int64) (*rawClone, error) {
	tgt, err := volume.Open(ctx, volume.Options{Path: o.Target, RequestedSize: o.Size, FilesystemOverhead: o.FilesystemOverhead, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("opening clone target %s: %w", o.Target, err)
	}
	c := &rawClone{opts: o, tgt: tgt, sum: cloner.NewDigest(), size: size, started: time.Now()}
	var want []iostage.Checksum
	for _, s := range o.Checksums {
		ck, err := iostage.ParseChecksum(s)
		if err != nil {
			tgt.Abort()
			return nil, err
		}
		want = append(want, ck)
	}
	c.check = iostage.NewVerifier(want)
	if size >= 0 {
		if err := c.checkSize(size); err != nil {
			tgt.Abort()
			return nil, err
		}
	}
	c.content = blkhash.New(0)
	if c.w, err = tgt.NewWriter(volume.WithContext(ctx), volume.WithContentHash(c.content)); err != nil {
		tgt.Abort()
		return nil, fmt.Errorf("clone target %s: %w", tgt.Path(), err)
	}
	return c, nil
}

// checkSize: a target at least the source's size; with ExactSize a device
// of exactly that size (a file ends up that size anyway: nothing grows it).
func (c *rawClone) checkSize(size int64) error {
	capacity := c.tgt.Capacity()
	if size > capacity {
		return fmt.Errorf("clone: %w", &errdefs.SizeError{ImageSize: size, TargetSize: capacity, What: "source size"})
	}
	if c.opts.ExactSize && c.tgt.Kind() == volume.Block && capacity != size {
		return fmt.Errorf("exact size: target device %s has %d bytes but the clone source has %d: %w", c.tgt.Path(), capacity, size, errdefs.ErrInvalidOptions)
	}
	return nil
}

// write accepts the source's bytes at the current offset.
func (c *rawClone) write(p []byte) error {
	if _, err := c.w.Write(p); err != nil {
		return err
	}
	c.sum.Data(p)
	_, _ = c.check.Write(p)
	c.offset += int64(len(p))
	return nil
}

// zero accepts n zero bytes without anything crossing the wire (nor
// being hashed: the digest knows a zero block's hash). A run is taken a
// block at a time, digest and target together, and ends when ctx does:
// the caller has checked n against the size, but a run as long as a
// large volume still takes a while.
func (c *rawClone) zero(ctx context.Context, n int64) error {
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
		}
		k := min(n, int64(len(zeroBlock)))
		if _, err := c.w.Write(zeroBlock[:k]); err != nil {
			return err
		}
		c.sum.Zeros(k)
		_, _ = c.check.Write(zeroBlock[:k]) // hashing zeros only when a checksum was asked for
		c.offset += k
		n -= k
	}
	return nil
}

// digest is the whole-source digest of what was accepted (taken once:
// nothing is accepted after it).
func (c *rawClone) digest() string {
	if c.final == "" {
		c.final = cloner.FormatDigest(c.sum.Sum())
	}
	return c.final
}

// commit finishes the image, checks its final size, allocates a file with
// Preallocation and makes it durable. The target is released either way.
func (c *rawClone) commit(ctx context.Context) (*importer.Result, error) {
	defer c.tgt.Close()
	n, err := c.w.Finish()
	if err != nil {
		return nil, fmt.Errorf("clone target %s: %w", c.tgt.Path(), err)
	}
	if c.size >= 0 && n != c.size {
		return nil, fmt.Errorf("clone stream ended at %d bytes, the source has %d: %w", n, c.size, errdefs.ErrInvalidImage)
	}
	if c.opts.ExactSize && c.tgt.Kind() == volume.Block && n != c.tgt.Capacity() {
		return nil, fmt.Errorf("exact size: the clone source had %d bytes, target device %s has %d: %w", n, c.tgt.Path(), c.tgt.Capacity(), errdefs.ErrInvalidOptions)
	}
	verified, err := c.check.Verify()
	if err != nil {
		return nil, fmt.Errorf("clone of %d bytes: %w", n, err)
	}
	content := c.content.Sum()
	if err := blkhash.Expect(content, c.opts.ExpectContentDigest); err != nil {
		return nil, fmt.Errorf("clone of %d bytes: %w", n, err)
	}
	prealloc := false
	if c.opts.Preallocation && c.tgt.Kind() == volume.File {
		if err := volume.GrowFile(c.tgt.WritePath(), n, true); err != nil {
			return nil, fmt.Errorf("preallocating %s: %w", c.tgt.WritePath(), err)
		}
		prealloc = true
	}
	if err := c.tgt.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing clone target %s: %w", c.tgt.Path(), err)
	}
	return &importer.Result{
		Complete: true, Target: c.tgt.Path(), SourceFormat: "raw", VirtualSize: n, BytesWritten: n,
		DataBytes: c.w.DataBytes(), PreallocationApplied: prealloc, Duration: time.Since(c.started),
		TargetDigest: c.digest(), Checksums: checksumStrings(verified), ContentDigest: content.String(),
	}, nil
}

// abort discards what was written (a file target is removed; a device is
// released).
func (c *rawClone) abort() { _ = c.tgt.Abort() }

func checksumStrings(cs []iostage.Checksum) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}
