// Package blkhash computes the content digest of a disk: the blkhash
// construction of nirs/blkhash as released in blkhash 0.10.1 (the
// version whose `blksum` this package matches; 0.9 and earlier spread
// the blocks over "streams" and give other digests), with SHA-256 and
// 64 KiB blocks, blksum's defaults:
//
//	digest = SHA256( SHA256(block 1) || … || SHA256(block N) || uint64le(length) )
//
// The guest-visible bytes are cut into 64 KiB blocks; the last one may be
// shorter and is hashed as it is. A block of zeros hashes to a constant, so
// a hole or an unallocated range costs one 32-byte update of the outer hash
// per block and no reading, and data blocks are hashed on all cores, 16 at
// a time in AVX-512 lanes where the CPU has them (lanes.go). The
// digest depends only on the bytes and their length: one disk as raw,
// qcow2.xz or on a device gives one digest.
//
// Hash takes the bytes in order (a raw stream, a file or device read from
// its start); Assembler takes them at offsets in any order (a decoder's
// guest writes).
package blkhash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// BlockSize is blksum's block size; another size gives other digests.
const BlockSize = 64 << 10

// Algorithm names the construction in a printed digest ("blk-sha256:hex").
const Algorithm = "blk-sha256"

// Size is the length of a digest in bytes.
const Size = sha256.Size

// Digest is a content digest.
type Digest [Size]byte

// String is "blk-sha256:" and the hex digest (blksum prints the hex alone).
func (d Digest) String() string { return Algorithm + ":" + d.Hex() }

// Hex is the digest as blksum prints it.
func (d Digest) Hex() string { return hex.EncodeToString(d[:]) }

// ParseDigest reads "blk-sha256:HEX" or the bare HEX blksum prints.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	h := strings.TrimPrefix(strings.TrimSpace(s), Algorithm+":")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != Size {
		return d, fmt.Errorf("content digest %q: want %s:<64 hex digits> or the 64 hex digits blksum prints: %w", s, Algorithm, errdefs.ErrInvalidOptions)
	}
	copy(d[:], b)
	return d, nil
}

// Expect checks d against an expected digest in either of ParseDigest's
// spellings; "" expects nothing. A difference wraps
// errdefs.ErrChecksumMismatch.
func Expect(d Digest, expected string) error {
	if expected == "" {
		return nil
	}
	want, err := ParseDigest(expected)
	if err != nil {
		return err
	}
	if want != d {
		return fmt.Errorf("content digest %s, expected %s: %w", d, want, errdefs.ErrChecksumMismatch)
	}
	return nil
}

// zeroBlock is a block of zeros, only ever read.
var zeroBlock = make([]byte, BlockSize)

// zeroBlockSum is SHA256 of a whole zero block: the hash of every block of
// a hole.
var zeroBlockSum = sha256.Sum256(zeroBlock)

// blockSum hashes one block; a whole zero block takes the precomputed
// hash (iostage.IsZero scans at about 18 GB/s, over ten times SHA-256's
// speed).
func blockSum(p []byte) Sum {
	if len(p) == BlockSize && iostage.IsZero(p) {
		return zeroBlockSum
	}
	return sha256.Sum256(p)
}
