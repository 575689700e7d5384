package sandbox

import (
	"fmt"
	"strings"
	"sync"
)

// StderrBuffer keeps what a child writes to its stderr within a bound: the
// first head bytes (what failed) and the last tail bytes (how it ended),
// so a child that prints without end cannot grow the parent's memory.
// Write never fails, so the child is never blocked on its stderr.
type StderrBuffer struct {
	mu         sync.Mutex
	keepHead   int
	keepTail   int
	head, tail []byte
	dropped    int64
}

// NewStderrBuffer keeps the first head and the last tail bytes written.
func NewStderrBuffer(head, tail int) *StderrBuffer {
	return &StderrBuffer{keepHead: head, keepTail: tail}
}

func (b *StderrBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if room := b.keepHead - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - b.keepTail; over > 0 {
		b.dropped += int64(over)
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

// String is what was kept, trimmed, with the number of bytes left out
// between the head and the tail when there is a tail to keep.
func (b *StderrBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped == 0 || b.keepTail == 0 {
		return strings.TrimSpace(string(b.head) + string(b.tail))
	}
	return strings.TrimSpace(fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", b.head, b.dropped, b.tail))
}
