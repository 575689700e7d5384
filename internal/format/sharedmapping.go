package format

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// sharedMapping is our mapping of a ring a child shares with us. One
// goroutine copies through it while another may close it, so unmap waits
// for a copy in progress, and a copy after it fails with os.ErrClosed
// instead of faulting.
type sharedMapping struct {
	mu     sync.Mutex
	mem    []byte
	closed bool
}

// copyOut copies the n bytes at off into dst, as many as fit.
func (m *sharedMapping) copyOut(dst []byte, off, n int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, os.ErrClosed
	}
	return copy(dst, m.mem[off:off+n]), nil
}

// copyIn copies src to off.
func (m *sharedMapping) copyIn(off int, src []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return os.ErrClosed
	}
	copy(m.mem[off:], src)
	return nil
}

// unmap unmaps the memory once no copy is in progress.
func (m *sharedMapping) unmap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		_ = unix.Munmap(m.mem)
	}
}
