package delta

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
)

// BlockSize is the unit a pass compares and sends: blkhash's block, so the
// hashes compared are the ones the content digest is made of.
const BlockSize = blkhash.BlockSize

// Signature is the hash of every block of a volume, in order, and its
// content digest.
type Signature struct {
	Size   int64
	Sums   []blkhash.Sum
	Digest blkhash.Digest
}

// Blocks is the number of blocks of a volume of size bytes.
func Blocks(size int64) int64 { return (size + BlockSize - 1) / BlockSize }

// Sign reads the first size bytes of f (a file's holes skipped) and
// returns their signature.
func Sign(ctx context.Context, f *os.File, size int64) (*Signature, error) {
	return sign(ctx, f, size, nil)
}

// sign is Sign advancing covered (when not nil) by the bytes signed so far.
func sign(ctx context.Context, f *os.File, size int64, covered *atomic.Int64) (*Signature, error) {
	d, sums, err := blkhash.BlockSums(ctx, f, size, 0, covered)
	if err != nil {
		return nil, err
	}
	return &Signature{Size: size, Sums: sums, Digest: d}, nil
}

// signatureMagic starts an encoded signature.
const signatureMagic = "DSIG1\x00\x00\x00"

// WriteTo encodes s: the magic, the size (8 bytes big-endian), the
// digest, then the block hashes.
func (s *Signature) WriteTo(w io.Writer) (int64, error) {
	head := make([]byte, 0, len(signatureMagic)+8+blkhash.Size)
	head = append(head, signatureMagic...)
	head = binary.BigEndian.AppendUint64(head, uint64(s.Size))
	head = append(head, s.Digest[:]...)
	n, err := w.Write(head)
	total := int64(n)
	if err != nil {
		return total, err
	}
	buf := make([]byte, 0, 1024*blkhash.Size)
	for i := 0; i < len(s.Sums); i += 1024 {
		buf = buf[:0]
		for _, sum := range s.Sums[i:min(i+1024, len(s.Sums))] {
			buf = append(buf, sum[:]...)
		}
		n, err := w.Write(buf)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ReadSignature decodes a signature of a volume of size bytes (the size
// the reader expects: another one is not this volume's base).
func ReadSignature(r io.Reader, size int64) (*Signature, error) {
	head := make([]byte, len(signatureMagic)+8+blkhash.Size)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, fmt.Errorf("reading the target's signature: %w", err)
	}
	if string(head[:len(signatureMagic)]) != signatureMagic {
		return nil, fmt.Errorf("the target's signature does not start with its magic: %w", errdefs.ErrInvalidImage)
	}
	s := &Signature{Size: int64(binary.BigEndian.Uint64(head[len(signatureMagic):]))}
	copy(s.Digest[:], head[len(signatureMagic)+8:])
	if s.Size != size {
		return nil, fmt.Errorf("the target's signature is of %d bytes, the source has %d: %w", s.Size, size, errdefs.ErrNoDeltaBase)
	}
	s.Sums = make([]blkhash.Sum, Blocks(size))
	for i := range s.Sums {
		if _, err := io.ReadFull(r, s.Sums[i][:]); err != nil {
			return nil, fmt.Errorf("reading the target's signature, block %d of %d: %w", i, len(s.Sums), err)
		}
	}
	if got := blkhash.DigestOfSums(s.Sums, s.Size); got != s.Digest {
		return nil, fmt.Errorf("the target's signature hashes to %s, it names %s: %w", got, s.Digest, errdefs.ErrInvalidImage)
	}
	return s, nil
}
