package nbdserver

import (
	"sync"

	"github.com/diskimport/engine/internal/blkhash"
)

// HashingExport is a WritableExport with every write and zeroing its
// client makes hashed on the way into a blkhash.Assembler, so the content
// digest of what qemu-img writes costs no read-back. Requests come
// concurrently: one at a time is hashed (on all cores) while the others
// write. A request the Assembler cannot place (qemu-img rewriting part of
// a block) leaves the digest unknown (Sum's error), never wrong, and the
// export goes on.
type HashingExport struct {
	WritableExport
	mu   sync.Mutex
	hash *blkhash.Assembler
	err  error
}

// NewHashingExport hashes what is written to e.
func NewHashingExport(e WritableExport) *HashingExport {
	return &HashingExport{WritableExport: e, hash: blkhash.NewAssembler(0)}
}

func (h *HashingExport) WriteAt(p []byte, off int64) (int, error) {
	h.mu.Lock()
	if h.err == nil {
		_, h.err = h.hash.WriteAt(p, off)
	}
	h.mu.Unlock()
	return h.WritableExport.WriteAt(p, off)
}

func (h *HashingExport) ZeroAt(off, n int64, mayDeallocate, fast bool) error {
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

// Sum is the digest of the first size bytes, once the client is done.
func (h *HashingExport) Sum(size int64) (blkhash.Digest, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return blkhash.Digest{}, h.err
	}
	return h.hash.Sum(size)
}
