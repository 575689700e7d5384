package format

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"

	"github.com/diskimport/engine/errdefs"
)

// BlockCodec is how a block given to a BlockInflater is compressed.
type BlockCodec int

const (
	// BlockZlib: a vmdk grain, one complete zlib stream (RFC 1950) without
	// a preset dictionary, its Adler-32 checked, inflating to at most the
	// block's output length.
	BlockZlib BlockCodec = iota
	// BlockDeflate: a qcow2 compressed cluster, raw deflate, of which the
	// first output-length bytes are taken (fewer when it ends sooner), as
	// qemu takes them; what follows is not read.
	BlockDeflate
)

func (c BlockCodec) mode() string {
	if c == BlockZlib {
		return "zlib"
	}
	return "deflate"
}

// BlockInflater inflates independent compressed blocks, vmdk grains or
// qcow2 compressed clusters, in the diskimport-inflate child (ISA-L's
// inflate, sandboxed as the gzip child), in the order they are sent:
// Send queues a block, Receive takes the next result; the two may run
// on two goroutines. On the 2 GiB bench streamOptimized vmdk, Go's
// inflate of the grains took 59 % of an import's CPU-seconds.
//
// A block reaches the child through an input ring, as the gzip stream
// does (sealedInput): Send copies it into the next slot and names it in
// a record, and the slot is Send's again once Receive took that block's
// result (the child inflates in order), so nothing is handed back. A
// pipe copied each block twice more, once into the kernel and once out.
type BlockInflater struct {
	p    *childProc
	ring *ringReader
	max  int

	inSlotBytes, inSlots int
	// credits holds a token per input slot Send may fill: Receive gives
	// one back per result.
	credits chan struct{}
	sent    int // blocks sent: the next goes into slot sent % inSlots
	rec     [blockRecordSize]byte
	in      sharedMapping // the input ring
}

// blockRecordSize is a block's record to the child: uint32 input slot,
// uint32 input length, uint32 output length, native order.
const blockRecordSize = 12

// StartBlockInflater starts the child for blocks of codec c inflating to
// at most maxOut bytes each, or returns nil (and no error) when there is
// no child (InflateChildPath): the caller inflates in Go then.
func StartBlockInflater(ctx context.Context, c BlockCodec, maxOut int, o Options) (*BlockInflater, error) {
	bin := o.InflateChildPath()
	if bin == "" {
		return nil, nil
	}
	o = o.withDefaults()
	slotBytes := (maxOut + pageSize - 1) &^ (pageSize - 1)
	// Enough slots for 4 MiB of results ahead, at least 4.
	slots := min(max(4, (4<<20)/slotBytes), 256)
	// A block's input: a grain is at most twice its output (the vmdk
	// decoder refuses longer), a compressed cluster at most its cluster.
	// Input slots for 2 MiB of blocks ahead, at least 4.
	inSlotBytes := (2*slotBytes + 4096 + pageSize - 1) &^ (pageSize - 1)
	inSlots := max(4, min(16, (2<<20)/inSlotBytes))
	p, err := startChild(ctx, childSpec{name: "inflate", bin: bin,
		args: []string{c.mode(), strconv.Itoa(slotBytes), strconv.Itoa(slots), strconv.Itoa(inSlotBytes), strconv.Itoa(inSlots)},
		// Beside both rings, the rest of the gzip child's budget.
		addressSpace: inflateRingAddressSpace + uint64(slotBytes*slots+inSlotBytes*inSlots), processes: 1,
		failed: inflateRingFailed, ring: true, ringSlots: slots, ringSlotBytes: slotBytes,
		blockInSlots: inSlots, blockInSlotBytes: inSlotBytes}, nil, o)
	if err != nil {
		return nil, err
	}
	b := &BlockInflater{p: p, ring: p.stdout.(*ringReader), max: slotBytes,
		in: sharedMapping{mem: p.blockIn}, inSlotBytes: inSlotBytes, inSlots: inSlots, credits: make(chan struct{}, inSlots)}
	for range inSlots {
		b.credits <- struct{}{}
	}
	return b, nil
}

// Send queues block, which must inflate to at most outLen bytes (no more
// than StartBlockInflater's maxOut). It blocks while the child is that
// far behind.
func (b *BlockInflater) Send(block []byte, outLen int) error {
	if outLen <= 0 || outLen > b.max {
		return fmt.Errorf("inflate: an output of %d bytes, outside 1..%d: %w", outLen, b.max, errdefs.ErrInvalidOptions)
	}
	if len(block) > b.inSlotBytes {
		// The decoders send none (their input buffers are twice an
		// output). The child is stopped, so Receive reports it gone
		// rather than wait for this block's result.
		b.p.Close()
		return fmt.Errorf("inflate: a block of %d bytes, more than %d: %w", len(block), b.inSlotBytes, errdefs.ErrInvalidOptions)
	}
	select {
	case <-b.credits:
	case <-b.p.ctx.Done():
		return fmt.Errorf("inflate: %w: %w", errdefs.ErrCancelled, b.p.ctx.Err())
	}
	slot := b.sent % b.inSlots
	if err := b.in.copyIn(slot*b.inSlotBytes, block); err != nil {
		return err
	}
	b.sent++
	binary.NativeEndian.PutUint32(b.rec[:4], uint32(slot))
	binary.NativeEndian.PutUint32(b.rec[4:8], uint32(len(block)))
	binary.NativeEndian.PutUint32(b.rec[8:], uint32(outLen))
	// A child that went away makes this fail (its exit status, which
	// Receive reports, says why).
	_, err := b.p.stdin.Write(b.rec[:])
	return err
}

// CloseSend says no block follows: the child ends once it has inflated
// the ones sent.
func (b *BlockInflater) CloseSend() error { return b.p.stdin.Close() }

// Receive copies the next block's inflated bytes into out and returns
// how many there were. A block that could not be inflated is an error
// wrapping errdefs.ErrInvalidImage, and the next block follows it; a
// child that failed or was cancelled gives its error from then on.
func (b *BlockInflater) Receive(out []byte) (int, error) {
	slot, n, _, err := b.ring.next()
	// The block's input slot is free again: the child is past it, or
	// gone (then a Send waiting for it fails on the record's write).
	select {
	case b.credits <- struct{}{}:
	default: // a Receive with no block sent
	}
	if err != nil {
		if werr := b.p.wait(); werr != nil {
			return 0, werr
		}
		if err == io.EOF {
			return 0, fmt.Errorf("inflate: the child ended before the block's result: %w", errdefs.ErrInvalidImage)
		}
		return 0, fmt.Errorf("inflate: %w: %w", err, errdefs.ErrInvalidImage)
	}
	if slot < 0 {
		return 0, blockFailure(n)
	}
	k, err := b.ring.copySlot(out, slot, n)
	b.ring.release(slot)
	return k, err
}

// Close stops the child and releases both rings.
func (b *BlockInflater) Close() error {
	b.p.stdin.Close()
	err := b.p.Close()
	b.in.unmap()
	return err
}

// Why the child could not inflate a block: native/inflate's BAD_*, in
// the order of its enum.
const (
	badZlibHeader = iota + 1
	badZlibDictionary
	badData
	badChecksum
	badTruncated
	badTooLong
)

// blockFailure is the error of a block the child could not inflate, by
// its reason, worded as Go's decoders word it.
func blockFailure(reason int) error {
	var why string
	switch reason {
	case badZlibHeader:
		why = "zlib: invalid header"
	case badZlibDictionary:
		why = "zlib: invalid dictionary"
	case badData:
		why = "flate: corrupt input"
	case badChecksum:
		why = "zlib: invalid checksum"
	case badTruncated:
		why = io.ErrUnexpectedEOF.Error()
	case badTooLong:
		why = "stream inflates to more than its output"
	default:
		why = fmt.Sprintf("reason %d", reason)
	}
	return fmt.Errorf("%s: %w", why, errdefs.ErrInvalidImage)
}
