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
// Send queues a block, Receive takes the next result. On the 2 GiB bench
// streamOptimized vmdk, Go's inflate of the grains took 59 % of an
// import's CPU-seconds.
type BlockInflater struct {
	p    *childProc
	ring *ringReader
	hdr  [8]byte
	max  int
}

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
	p, err := startChild(ctx, childSpec{name: "inflate", bin: bin,
		args: []string{c.mode(), strconv.Itoa(slotBytes), strconv.Itoa(slots)},
		// Beside the ring, its input buffer (twice a slot) and the rest
		// of the gzip child's budget.
		addressSpace: inflateRingAddressSpace + uint64(slotBytes*(slots+2)), processes: 1,
		failed: inflateRingFailed, ring: true, ringSlots: slots, ringSlotBytes: slotBytes}, nil, o)
	if err != nil {
		return nil, err
	}
	return &BlockInflater{p: p, ring: p.stdout.(*ringReader), max: slotBytes}, nil
}

// Send queues block, which must inflate to at most outLen bytes (no more
// than StartBlockInflater's maxOut). It blocks while the child is that
// far behind.
func (b *BlockInflater) Send(block []byte, outLen int) error {
	if outLen <= 0 || outLen > b.max {
		return fmt.Errorf("inflate: an output of %d bytes, outside 1..%d: %w", outLen, b.max, errdefs.ErrInvalidOptions)
	}
	binary.NativeEndian.PutUint32(b.hdr[:4], uint32(len(block)))
	binary.NativeEndian.PutUint32(b.hdr[4:], uint32(outLen))
	// A child that went away makes these fail (its exit status, which
	// Receive reports, says why).
	if _, err := b.p.stdin.Write(b.hdr[:]); err != nil {
		return err
	}
	_, err := b.p.stdin.Write(block)
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
	slot, n, err := b.ring.next()
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

// Close stops the child and releases the ring.
func (b *BlockInflater) Close() error {
	b.p.stdin.Close()
	return b.p.Close()
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
