package iostage

import (
	"errors"
	"io"
	"sync"
)

// WindowReaderAt serves the small reads of a run through a remote object
// from larger aligned windows, each fetched with one range request, and
// fetches the next window while the current one is read. qemu-img reads a
// compressed qcow2 one cluster (a few KiB) at a time, in file order across
// its coroutines: without windows every cluster is an HTTP request and a
// round trip (BenchmarkRangedConvert in internal/nbdserver measures both).
// Reads of at least windowSmallRead go straight through (qemu-img reads
// runs of plain clusters 2 MiB at a time), and so does a small read that
// is not near the last one (an L2 table of a sparse image): a window then
// would fetch a megabyte for a few kilobytes.
//
// It is safe for concurrent use; readers of a window being fetched wait
// for that one request.
type WindowReaderAt struct {
	r      io.ReaderAt
	size   int64
	window int64
	max    int // windows kept

	mu      sync.Mutex
	wins    []*readWindow
	tick    int64
	lastEnd int64 // end of the last small read
}

type readWindow struct {
	off  int64
	buf  []byte
	done chan struct{}
	err  error // valid after done
	used int64 // tick of the last use, for eviction
}

const (
	windowSize      = 4 << 20
	windowsKept     = 8 // memory: windowsKept × windowSize
	windowSmallRead = 1 << 20
)

// NewWindowReaderAt serves r, an object of size bytes, through windows.
func NewWindowReaderAt(r io.ReaderAt, size int64) *WindowReaderAt {
	return &WindowReaderAt{r: r, size: size, window: windowSize, max: windowsKept, lastEnd: -1}
}

func (ra *WindowReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= ra.size || len(p) >= windowSmallRead {
		return ra.r.ReadAt(p, off)
	}
	n := 0
	for n < len(p) && off+int64(n) < ra.size {
		at := off + int64(n)
		w := ra.windowFor(at, off, len(p))
		if w == nil {
			k, err := ra.r.ReadAt(p[n:], at)
			return n + k, err
		}
		<-w.done
		if w.err != nil {
			ra.drop(w)
			return n, w.err
		}
		n += copy(p[n:], w.buf[at-w.off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// windowFor returns the window holding at, starting its fetch (and the
// next window's) when needed; nil means read directly.
func (ra *WindowReaderAt) windowFor(at, off int64, n int) *readWindow {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	start := at - at%ra.window
	w := ra.find(start)
	if w == nil {
		// A new window only for a read continuing a run: near the last
		// small read, or next to a window (qemu-img's coroutines each
		// follow a run of their own, a few windows apart).
		near := ra.lastEnd >= 0 && off >= ra.lastEnd-ra.window && off <= ra.lastEnd+ra.window
		for _, x := range ra.wins {
			near = near || (start >= x.off-ra.window && start <= x.off+ra.window)
		}
		ra.lastEnd = off + int64(n)
		if !near {
			return nil
		}
		if w = ra.start(start); w == nil {
			return nil
		}
	}
	ra.lastEnd = max(ra.lastEnd, off+int64(n))
	ra.tick++
	w.used = ra.tick
	if next := start + ra.window; next < ra.size && at-start >= ra.window/2 && ra.find(next) == nil {
		ra.start(next)
	}
	return w
}

func (ra *WindowReaderAt) find(start int64) *readWindow {
	for _, w := range ra.wins {
		if w.off == start {
			return w
		}
	}
	return nil
}

// start begins fetching the window at start, evicting the least recently
// used finished window when all are taken; nil when every window is still
// being fetched.
func (ra *WindowReaderAt) start(start int64) *readWindow {
	if len(ra.wins) >= ra.max {
		victim := -1
		for i, w := range ra.wins {
			select {
			case <-w.done:
				if victim < 0 || w.used < ra.wins[victim].used {
					victim = i
				}
			default:
			}
		}
		if victim < 0 {
			return nil
		}
		ra.wins = append(ra.wins[:victim], ra.wins[victim+1:]...)
	}
	w := &readWindow{off: start, done: make(chan struct{})}
	ra.tick++
	w.used = ra.tick
	ra.wins = append(ra.wins, w)
	go func() {
		defer close(w.done)
		buf := make([]byte, min(ra.window, ra.size-start))
		k, err := ra.r.ReadAt(buf, start)
		if k == len(buf) {
			err = nil
		} else if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		w.buf, w.err = buf, err
	}()
	return w
}

// drop forgets a failed window, so a later read asks again.
func (ra *WindowReaderAt) drop(w *readWindow) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	for i, x := range ra.wins {
		if x == w {
			ra.wins = append(ra.wins[:i], ra.wins[i+1:]...)
			return
		}
	}
}
