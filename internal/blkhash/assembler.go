package blkhash

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math/bits"
	"runtime"
	"sort"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// Assembler takes a disk's bytes at offsets, in any order, as a decoder
// writes them; what is never written reads as zeros. A later write over
// the same bytes wins. Block hashes are folded into the outer hash as soon
// as every block before them is known, so data written in offset order
// holds nothing; a block after a range not yet written keeps its 32-byte
// hash until Sum (0.05 % of the data), and a block written in pieces keeps
// a 64 KiB buffer until its last 512-byte sector arrives.
//
// Its methods are for one goroutine at a time.
type Assembler struct {
	workers int
	outer   hash.Hash
	next    int64 // first block not folded yet
	pages   map[int64]*sumPage
	partial map[int64]*partialBlock
	free    []*partialBlock
	end     int64 // end of the furthest write
	sums    [][Size]byte
	peak    int64 // most of Held at once
	// batch holds copies of whole blocks written a few at a time (a
	// decoder's clusters and grains) until a batch of the machine's
	// hashing can be hashed at once (16 in lanes, 2 in pairs); nil until
	// the first such write, and when blocks are hashed one by one.
	batch *blockBatch
}

// blockBatch is blocks waiting for their hash, in the order written.
type blockBatch struct {
	mode   hashing
	buf    []byte  // mode.batch() blocks
	blocks []int64 // mode.batch() of them
	n      int
}

// batchBelow is how many whole blocks a write must have to be hashed in
// place: fewer are copied into the batch. In lanes, minLanes; in pairs,
// 2; one by one nothing is batched.
func batchBelow(m hashing) int {
	switch m {
	case inLanes:
		return minLanes
	case inPairs:
		return 2
	}
	return 0
}

// pageBlocks is how many block hashes one page holds: 64 MiB of guest
// space in 32 KiB.
const pageBlocks = 1024

type sumPage struct {
	sums [pageBlocks][Size]byte
	set  [pageBlocks / 64]uint64
	n    int
}

// sectorSize is the granule a piecewise-written block is tracked in.
const sectorSize = 512

type partialBlock struct {
	buf     []byte
	covered [BlockSize / sectorSize / 64]uint64
	n       int // sectors covered
}

// NewAssembler returns an Assembler hashing on workers goroutines (0:
// GOMAXPROCS).
func NewAssembler(workers int) *Assembler {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Assembler{workers: workers, outer: sha256.New(), pages: map[int64]*sumPage{}, partial: map[int64]*partialBlock{}}
}

// WriteAt hashes p as the bytes at off. It fails for a negative off and
// for bytes it can no longer place: inside a block already folded, or a
// piece of a block already hashed whole (no decoder rewrites guest bytes;
// a whole block written again, or zeroed, is fine).
func (a *Assembler) WriteAt(p []byte, off int64) (int, error) {
	wait, err := a.StartAt(p, off)
	if err != nil {
		return 0, err
	}
	wait()
	return len(p), nil
}

// StartAt hashes p as the bytes at off on the workers and returns at once,
// so the caller can write p out meanwhile. p must not change until wait
// has returned, and wait must be called before any other method of a.
func (a *Assembler) StartAt(p []byte, off int64) (wait func(), err error) {
	if off < 0 {
		return nil, fmt.Errorf("blkhash: write at offset %d: %w", off, errdefs.ErrInvalidOptions)
	}
	if len(p) == 0 {
		return func() {}, nil
	}
	if err := a.notFolded(off); err != nil {
		return nil, err
	}
	a.flushOverlap(off, off+int64(len(p)))
	a.end = max(a.end, off+int64(len(p)))
	// The pieces of blocks p begins or ends inside.
	if r := off % BlockSize; r != 0 {
		c := min(int64(len(p)), BlockSize-r)
		if err := a.piece(off/BlockSize, int(r), p[:c]); err != nil {
			return nil, err
		}
		p, off = p[c:], off+c
	}
	full := len(p) / BlockSize
	if tail := p[full*BlockSize:]; len(tail) > 0 {
		if err := a.piece(off/BlockSize+int64(full), 0, tail); err != nil {
			return nil, err
		}
	}
	if full == 0 {
		a.advance()
		return func() {}, nil
	}
	first := off / BlockSize
	for b := first; b < first+int64(full); b++ {
		a.dropPiece(b) // a whole write wins over earlier pieces
	}
	if mode := hashingHere(); full < batchBelow(mode) {
		return a.addToBatch(p[:full*BlockSize], first, mode), nil
	}
	if cap(a.sums) < full {
		a.sums = make([][Size]byte, full)
	}
	sums := a.sums[:full]
	wg := sumBlocks(p[:full*BlockSize], nil, sums, a.workers)
	return func() {
		wg.Wait()
		for i := range sums {
			a.store(first+int64(i), sums[i])
		}
		a.advance()
	}, nil
}

// addToBatch copies the whole blocks p (block first on) into the batch:
// a zero block takes its hash at once, and a full batch is hashed on a
// worker while the caller writes p.
func (a *Assembler) addToBatch(p []byte, first int64, mode hashing) (wait func()) {
	if a.batch == nil {
		a.batch = &blockBatch{mode: mode, buf: make([]byte, mode.batch()*BlockSize), blocks: make([]int64, mode.batch())}
		a.peak = max(a.peak, a.Held())
	}
	bt := a.batch
	for i := range len(p) / BlockSize {
		block := p[i*BlockSize : (i+1)*BlockSize]
		if iostage.IsZero(block) {
			a.store(first+int64(i), zeroBlockSum)
			continue
		}
		if bt.n == len(bt.blocks) {
			a.flushBatch()
		}
		copy(bt.buf[bt.n*BlockSize:], block)
		bt.blocks[bt.n] = first + int64(i)
		bt.n++
	}
	if bt.n < len(bt.blocks) {
		a.advance()
		return func() {}
	}
	sums := make([]Sum, bt.n)
	done := make(chan struct{})
	go func() {
		sumShare(bt.buf, batchedNoZeros[:bt.n], sums, 0, bt.n, bt.mode)
		close(done)
	}()
	return func() {
		<-done
		for i, b := range bt.blocks {
			a.store(b, sums[i])
		}
		bt.n = 0
		a.advance()
	}
}

// batchedNoZeros says of every block in a batch that it is not all
// zeros: zero blocks never enter it.
var batchedNoZeros [lanes]bool

// flushBatch hashes and stores the blocks waiting in the batch, in the
// order they were written (a later write of one block wins).
func (a *Assembler) flushBatch() {
	bt := a.batch
	if bt == nil || bt.n == 0 {
		return
	}
	sums := make([]Sum, bt.n)
	sumShare(bt.buf[:bt.n*BlockSize], batchedNoZeros[:bt.n], sums, 0, bt.n, bt.mode)
	for i, b := range bt.blocks[:bt.n] {
		a.store(b, sums[i])
	}
	bt.n = 0
}

// flushOverlap flushes the batch when a block in it lies in [lo, hi):
// what comes next for that block must land after it.
func (a *Assembler) flushOverlap(lo, hi int64) {
	if a.batch == nil {
		return
	}
	for _, b := range a.batch.blocks[:a.batch.n] {
		if b*BlockSize < hi && (b+1)*BlockSize > lo {
			a.flushBatch()
			return
		}
	}
}

// notFolded refuses a write into blocks already folded into the outer
// hash: no decoder writes a guest byte twice, and the digest could not
// follow it.
func (a *Assembler) notFolded(off int64) error {
	if off/BlockSize < a.next {
		return fmt.Errorf("blkhash: write at offset %d into a block already hashed (%d blocks are): %w", off, a.next, errdefs.ErrInvalidImage)
	}
	return nil
}

// ZeroAt makes [off, off+n) read as zeros again, whatever was written
// there before.
func (a *Assembler) ZeroAt(off, n int64) error {
	if off < 0 || n < 0 {
		return fmt.Errorf("blkhash: zero %d bytes at offset %d: %w", n, off, errdefs.ErrInvalidOptions)
	}
	if n == 0 {
		return nil
	}
	if err := a.notFolded(off); err != nil {
		return err
	}
	a.flushOverlap(off, off+n)
	a.end = max(a.end, off+n)
	if r := off % BlockSize; r != 0 {
		c := min(n, BlockSize-r)
		if err := a.piece(off/BlockSize, int(r), zeroBlock[:c]); err != nil {
			return err
		}
		off, n = off+c, n-c
	}
	b0, b1 := off/BlockSize, (off+n)/BlockSize
	if rest := (off + n) % BlockSize; rest > 0 && n > 0 {
		if err := a.piece(b1, 0, zeroBlock[:rest]); err != nil {
			return err
		}
	}
	if b1 <= b0 {
		return nil
	}
	// Forget what whole blocks of the range held, walking whichever is
	// shorter: the range's pages or the pages held.
	if (b1-b0)/pageBlocks+1 < int64(len(a.pages)) {
		for p := b0 / pageBlocks; p <= (b1-1)/pageBlocks; p++ {
			a.unstorePage(p, b0, b1)
		}
	} else {
		for p := range a.pages {
			a.unstorePage(p, b0, b1)
		}
	}
	for b := range a.partial {
		if b >= b0 && b < b1 {
			a.dropPiece(b)
		}
	}
	return nil
}

// unstorePage forgets the hashes of page p's blocks in [b0, b1).
func (a *Assembler) unstorePage(p, b0, b1 int64) {
	if a.pages[p] == nil {
		return
	}
	for b := max(b0, p*pageBlocks); b < min(b1, (p+1)*pageBlocks); b++ {
		a.unstore(b)
	}
	if a.pages[p].n == 0 {
		delete(a.pages, p)
	}
}

// piece copies bytes into block b at offset at; the block is hashed once
// all its sectors are there.
func (a *Assembler) piece(b int64, at int, p []byte) error {
	pb := a.partial[b]
	if pb == nil && a.stored(b) {
		// Only its hash is left: the bytes p does not cover are gone.
		return fmt.Errorf("blkhash: %d bytes written at offset %d inside a block already hashed whole: %w",
			len(p), b*BlockSize+int64(at), errdefs.ErrInvalidImage)
	}
	if pb == nil {
		if k := len(a.free); k > 0 {
			pb, a.free = a.free[k-1], a.free[:k-1]
			clear(pb.buf)
			pb.covered, pb.n = [len(pb.covered)]uint64{}, 0
		} else {
			pb = &partialBlock{buf: make([]byte, BlockSize)}
		}
		a.partial[b] = pb
		a.peak = max(a.peak, a.Held())
	}
	copy(pb.buf[at:], p)
	// Only sectors p covers entirely count.
	for s := (at + sectorSize - 1) / sectorSize; (s+1)*sectorSize <= at+len(p); s++ {
		w, m := s/64, uint64(1)<<(s%64)
		if pb.covered[w]&m == 0 {
			pb.covered[w] |= m
			pb.n++
		}
	}
	if pb.n == BlockSize/sectorSize {
		a.store(b, blockSum(pb.buf))
		a.dropPiece(b)
	}
	return nil
}

func (a *Assembler) stored(b int64) bool {
	pg := a.pages[b/pageBlocks]
	i := b % pageBlocks
	return pg != nil && pg.set[i/64]&(1<<(i%64)) != 0
}

func (a *Assembler) dropPiece(b int64) {
	if pb := a.partial[b]; pb != nil {
		delete(a.partial, b)
		a.free = append(a.free, pb)
	}
}

func (a *Assembler) store(b int64, sum [Size]byte) {
	pg := a.pages[b/pageBlocks]
	if pg == nil {
		pg = &sumPage{}
		a.pages[b/pageBlocks] = pg
		a.peak = max(a.peak, a.Held())
	}
	i := b % pageBlocks
	w, m := i/64, uint64(1)<<(i%64)
	if pg.set[w]&m == 0 {
		pg.set[w] |= m
		pg.n++
	}
	pg.sums[i] = sum
}

func (a *Assembler) unstore(b int64) {
	pg := a.pages[b/pageBlocks]
	if pg == nil {
		return
	}
	i := b % pageBlocks
	w, m := i/64, uint64(1)<<(i%64)
	if pg.set[w]&m != 0 {
		pg.set[w] &^= m
		pg.n--
	}
}

// advance folds the stored hashes that follow the folded ones without a
// gap, and frees their pages.
func (a *Assembler) advance() {
	for {
		pg := a.pages[a.next/pageBlocks]
		if pg == nil {
			return
		}
		i := a.next % pageBlocks
		w, m := i/64, uint64(1)<<(i%64)
		if pg.set[w]&m == 0 {
			return
		}
		a.outer.Write(pg.sums[i][:])
		pg.set[w] &^= m
		pg.n--
		if pg.n == 0 {
			delete(a.pages, a.next/pageBlocks)
		}
		a.next++
	}
}

// Held is the memory the Assembler holds for blocks it cannot fold yet,
// and PeakHeld the most it held at once.
func (a *Assembler) Held() int64 {
	held := int64(len(a.pages))*int64(pageBlocks*Size) + int64(len(a.partial)+len(a.free))*BlockSize
	if a.batch != nil {
		held += int64(len(a.batch.buf))
	}
	return held
}

func (a *Assembler) PeakHeld() int64 { return a.peak }

// Sum finishes the digest of a disk of size bytes: every byte never written
// is a zero. Writes past size fail it. Call it once.
func (a *Assembler) Sum(size int64) (Digest, error) {
	a.flushBatch()
	var d Digest
	if a.end > size {
		return d, fmt.Errorf("blkhash: bytes written up to offset %d, past the disk's %d bytes: %w", a.end, size, errdefs.ErrInvalidImage)
	}
	blocks := (size + BlockSize - 1) / BlockSize
	last := blocks - 1 // may be short
	lastLen := size - last*BlockSize
	// Blocks with something in them, in order; zeros between them.
	held := make([]int64, 0, len(a.partial))
	for b := range a.partial {
		held = append(held, b)
	}
	for p, pg := range a.pages {
		for w, word := range pg.set {
			for word != 0 {
				i := bits.TrailingZeros64(word)
				word &^= 1 << i
				held = append(held, p*pageBlocks+int64(w*64+i))
			}
		}
	}
	sort.Slice(held, func(i, j int) bool { return held[i] < held[j] })
	at := a.next
	zeroUntil := func(b int64) { // blocks [at, b) are zero
		if b <= at {
			return
		}
		whole := b - at
		if b-1 == last && lastLen < BlockSize {
			whole--
		}
		foldZeroBlocks(a.outer, whole)
		if whole < b-at {
			s := sha256.Sum256(zeroBlock[:lastLen])
			a.outer.Write(s[:])
		}
		at = b
	}
	for _, b := range held {
		if b < at {
			continue // stored whole and in pieces: the pieces came later and are in partial
		}
		zeroUntil(b)
		var s [Size]byte
		if pb := a.partial[b]; pb != nil {
			n := BlockSize
			if b == last {
				n = int(lastLen)
			}
			s = blockSum(pb.buf[:n])
		} else {
			pg := a.pages[b/pageBlocks]
			s = pg.sums[b%pageBlocks]
		}
		a.outer.Write(s[:])
		at = b + 1
	}
	zeroUntil(blocks)
	a.outer.Write(binary.LittleEndian.AppendUint64(nil, uint64(size)))
	a.outer.Sum(d[:0])
	return d, nil
}
