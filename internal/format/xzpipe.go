package format

import (
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The xz child reads its input and writes its output 8 KiB at a time. Through
// default 64 KiB pipes, read eagerly, that is one wakeup of our goroutine per
// 8 KiB (a quarter of a million for a 2 GiB disk, each a park, an epoll wait
// and a futex): measured at about 1.5 s of CPU on a 2 GiB import, taken from
// the cores xz -T2 decodes on. Grown to 1 MiB and read or written only once
// they are half full or half empty, the pipes cost a few thousand wakeups.
const (
	// xzPipeSize is Linux's default pipe-max-size, the most an unprivileged
	// process may ask for.
	xzPipeSize = 1 << 20
	// pipeMaxWaits bounds the sleeps of one call, so a slow child still
	// gets its bytes moved now and then, and a dead one is seen by the next
	// read or write.
	pipeMaxWaits = 8
	// Sleeps are bounded below by what Go's timers resolve when the process
	// is idle (about a millisecond) and above so that a wrong estimate
	// costs little: sleeping too long stalls a single-threaded xz on a full
	// pipe, too short only costs a wakeup.
	minPace = 500 * time.Microsecond
	maxPace = 4 * time.Millisecond
)

// pipeRate is the other end's speed through the pipe (bytes per second),
// smoothed, so one sleep usually covers the wait for enough bytes or room.
type pipeRate struct{ bps float64 }

// pace is how long the other end should take to move n bytes.
func (r *pipeRate) pace(n int) time.Duration {
	if r.bps <= 0 {
		return time.Millisecond
	}
	return min(max(time.Duration(float64(n)/r.bps*1e9), minPace), maxPace)
}

// observe notes that n bytes moved in d.
func (r *pipeRate) observe(n int, d time.Duration) {
	if n <= 0 || d <= 0 {
		return
	}
	bps := float64(n) / d.Seconds()
	if r.bps == 0 {
		r.bps = bps
		return
	}
	r.bps = 0.75*r.bps + 0.25*bps
}

// sleepFor sleeps about d and returns how long it took.
func sleepFor(d time.Duration) time.Duration {
	t := time.Now()
	time.Sleep(d)
	return time.Since(t)
}

// blockingPipe is os.Pipe with blocking descriptors that Go's poller does
// not watch. A pipe in the poller (epoll, edge-triggered) wakes the
// process's idle thread on every write to it, whether or not a goroutine
// waits on it: 8 KiB at a time from xz, that was ~40,000 wakeups and
// context switches on a 2 GiB import. Blocking reads and writes are fine
// here: each end has one goroutine, and the pacing below keeps them from
// blocking for long.
func blockingPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

// growPipe asks for a size-byte pipe buffer and returns the size the pipe
// has afterwards (the kernel may refuse: a user's pipe quota, a lower
// pipe-max-size), or 0 when it cannot be read.
func growPipe(f *os.File, size int) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	got := 0
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, size)
		got, _ = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
	})
	return got
}

// pipeQueued returns how many bytes wait in the pipe (FIONREAD, alias TIOCINQ, which works
// on either end), or -1 when it cannot tell.
func pipeQueued(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	_ = rc.Control(func(fd uintptr) {
		v, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ)
		if err == nil {
			n = v
		}
	})
	return n
}

// pacedPipeReader reads the read end of a pipe in large pieces: while less
// than half the pipe is queued it sleeps for about the time the writer
// needs to fill it that far, instead of taking each write as it comes.
// Half, so that a writer going twice as fast as estimated still finds room. A
// pipe that stays empty is waited on as usual (the poller), so a child that
// is slow to start costs nothing, and EOF is seen at once.
type pacedPipeReader struct {
	f      *os.File
	target int // 0: not paced (the pipe stayed small)
	fill   pipeRate
}

func newPacedPipeReader(f *os.File, size int) *pacedPipeReader {
	r := &pacedPipeReader{f: f}
	if size >= minPacedPipe {
		r.target = size / 2
	}
	return r
}

const pageSize = 4096

// minPacedPipe is the smallest pipe worth pacing: a sleep lasts about a
// millisecond, in which xz writes up to ~0.5 MB; a smaller pipe (the kernel
// refused to grow it) would fill and stall xz, so it is used as it comes.
const minPacedPipe = xzPipeSize

func (r *pacedPipeReader) Read(p []byte) (int, error) {
	if r.target > 0 {
		want := min(len(p), r.target)
		q := pipeQueued(r.f)
		for waits := 0; waits < pipeMaxWaits && q >= 0 && q < want; waits++ {
			if q == 0 && waits > 0 {
				break // still nothing: wait in the poller, which also sees EOF
			}
			d := sleepFor(r.fill.pace(want - q))
			q2 := pipeQueued(r.f)
			r.fill.observe(q2-q, d)
			q = q2
		}
	}
	return r.f.Read(p)
}

func (r *pacedPipeReader) Close() error { return r.f.Close() }

// pacedPipeWriter writes to the write end of a pipe once it is at least half
// empty, sleeping for about the time the reader needs to drain that much,
// so the writer is woken a few times per pipe instead of after every 8 KiB
// the reader takes.
type pacedPipeWriter struct {
	f     *os.File
	size  int
	half  int // 0: not paced
	drain pipeRate
}

func newPacedPipeWriter(f *os.File, size int) *pacedPipeWriter {
	w := &pacedPipeWriter{f: f, size: size}
	if size >= minPacedPipe {
		w.half = size / 2
	}
	return w
}

func (w *pacedPipeWriter) Write(p []byte) (int, error) {
	if w.half == 0 {
		return w.f.Write(p)
	}
	n := 0
	for n < len(p) {
		want := min(len(p)-n, w.half)
		free := want
		for range pipeMaxWaits {
			q := pipeQueued(w.f)
			if q < 0 {
				break
			}
			if free = w.size - q; free >= want {
				break
			}
			d := sleepFor(w.drain.pace(want - free))
			if q2 := pipeQueued(w.f); q2 >= 0 {
				w.drain.observe(q-q2, d)
			}
		}
		// After the waits, write whatever fits (at least a page): a reader
		// that went away makes the write fail, a slow one makes it block.
		k, err := w.f.Write(p[n : n+min(len(p)-n, max(free, pageSize))])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (w *pacedPipeWriter) Close() error { return w.f.Close() }

var (
	_ io.ReadCloser  = (*pacedPipeReader)(nil)
	_ io.WriteCloser = (*pacedPipeWriter)(nil)
)
