package cloner

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
)

// DigestPrefix names the whole-source digest of a clone: the sha256 of the
// sha256 of every 1 MiB block, followed by the size as 8 big-endian bytes.
// It is a function of the content alone, like a plain sha256, but a block
// of zeros has a known hash: neither side spends time hashing the zero
// runs a volume mostly is (plain sha256 runs at ~0.5 GB/s without SHA
// instructions, which made it the slowest stage of a sparse clone).
const DigestPrefix = "sha256-1m-tree:"

// digestBlock is the block size of the digest.
const digestBlock = 1 << 20

// zeroBlockHash is the sha256 of a block of zeros.
var zeroBlockHash = sha256.Sum256(make([]byte, digestBlock))

// Digest computes the whole-source digest from the source's bytes in
// order, given as data or as runs of zeros.
type Digest struct {
	outer, inner hash.Hash
	fill         int  // bytes of the current block seen
	zeroOnly     bool // the current block is zeros so far, none fed to inner
	size         int64
}

// NewDigest starts a digest.
func NewDigest() *Digest {
	return &Digest{outer: sha256.New(), inner: sha256.New(), zeroOnly: true}
}

// Size is the number of bytes digested.
func (d *Digest) Size() int64 { return d.size }

// Data adds the next bytes.
func (d *Digest) Data(p []byte) {
	for len(p) > 0 {
		k := min(len(p), digestBlock-d.fill)
		if d.fill == 0 && k == digestBlock && bytes.Equal(p[:k], zeroBlockBytes) {
			d.fill = k // a whole zero block: its hash is known
		} else {
			d.catchUp()
			d.inner.Write(p[:k])
			d.fill += k
		}
		d.size += int64(k)
		p = p[k:]
		d.closeFull()
	}
}

// Zeros adds n zero bytes.
func (d *Digest) Zeros(n int64) {
	for n > 0 {
		k := int(min(n, int64(digestBlock-d.fill)))
		if !d.zeroOnly {
			d.inner.Write(zeroBlockBytes[:k])
		}
		d.fill += k
		d.size += int64(k)
		n -= int64(k)
		d.closeFull()
	}
}

// catchUp feeds the zeros a block started with once data follows them.
func (d *Digest) catchUp() {
	if d.zeroOnly {
		d.inner.Write(zeroBlockBytes[:d.fill])
		d.zeroOnly = false
	}
}

func (d *Digest) closeFull() {
	if d.fill == digestBlock {
		d.closeBlock()
	}
}

func (d *Digest) closeBlock() {
	if d.zeroOnly && d.fill == digestBlock {
		d.outer.Write(zeroBlockHash[:])
	} else {
		d.catchUp()
		d.outer.Write(d.inner.Sum(nil))
	}
	d.inner.Reset()
	d.fill, d.zeroOnly = 0, true
}

// Sum returns the digest of everything added (the Digest is then done).
func (d *Digest) Sum() [sha256.Size]byte {
	if d.fill > 0 {
		d.closeBlock()
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(d.size))
	d.outer.Write(n[:])
	var out [sha256.Size]byte
	copy(out[:], d.outer.Sum(nil))
	return out
}

// FormatDigest renders a digest as DigestPrefix + hex.
func FormatDigest(sum [sha256.Size]byte) string { return DigestPrefix + hex.EncodeToString(sum[:]) }

var zeroBlockBytes = make([]byte, digestBlock)
