package cloner

import (
	"errors"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// directAlign is the alignment of O_DIRECT reads: buffer, offset and
// length (4 KiB serves 512-byte and 4 KiB logical blocks alike).
const directAlign = 4096

// sourceFile is a clone's source read with O_DIRECT where its kernel and
// file system take it, unless the page cache holds the pages already
// (cached): the bytes then reach the buffer without a copy through the
// page cache, which a pod's memory limit also counts (a volume larger
// than the pod's 600M limit streamed through it). Measured on a 2 GiB
// loop device, 35 % data: the cloner's system CPU 0.59-0.61 s buffered,
// 0.32-0.40 s direct. A read O_DIRECT refuses (EINVAL: a file
// system that takes the flag at open but not the read, an offset off the
// alignment) goes through the page cache. Its reads may run on several
// goroutines (the read-ahead's, and a resumed request's).
type sourceFile struct {
	plain  *os.File
	direct *os.File // nil: O_DIRECT not taken at open
	size   int64
	// refused: a direct read failed with EINVAL; the rest go buffered.
	refused atomic.Bool
	// noCachestat: the kernel cannot tell which pages are cached
	// (cachestat failed); every aligned read goes direct.
	noCachestat atomic.Bool
	// read counts the bytes read (Result.SourceRead).
	read atomic.Int64
}

// openSourceFile opens the clone source at path, with O_DIRECT too when
// it can.
func openSourceFile(path string) (*sourceFile, error) {
	f, size, err := openDevice(path)
	if err != nil {
		return nil, err
	}
	s := &sourceFile{plain: f, size: size}
	if d, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0); err == nil {
		s.direct = d
	}
	return s, nil
}

// readAt reads min(len(p), size-off) bytes at off into p (aligned to
// directAlign) and returns how many it read.
func (s *sourceFile) readAt(p []byte, off int64) (n int, err error) {
	defer func() { s.read.Add(int64(n)) }()
	want := int(min(int64(len(p)), s.size-off))
	if s.direct != nil && !s.refused.Load() && off%directAlign == 0 && !s.cached(off, want) {
		// The length rounded up to the alignment: the source ends
		// before it, and the read stops there.
		n, err := s.direct.ReadAt(p[:min(len(p), (want+directAlign-1)&^(directAlign-1))], off)
		if n >= want {
			return want, nil // the end of the source within the rounding
		}
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		s.refused.Store(true)
	}
	return s.plain.ReadAt(p[:want], off)
}

// cached tells whether the page cache holds every page of [off, off+n),
// which a plain read then copies from memory: O_DIRECT would read them
// from the device again (a filesystem volume's disk.img written or read
// on this node lately; 720 MiB of it from a virtio disk took 0.7-1.2 s,
// from the cache 0.1-0.3 s). It asks cachestat(2), which reads nothing:
// a read with RWF_NOWAIT, the other way to ask, starts the kernel's
// readahead of the pages it does not find (64 MiB of a file's dropped
// pages were all cached after one pass of such reads). A kernel before
// 6.5 has no cachestat: every read goes direct, as before it.
func (s *sourceFile) cached(off int64, n int) bool {
	if n <= 0 || s.noCachestat.Load() {
		return false
	}
	r := unix.CachestatRange{Off: uint64(off), Len: uint64(n)}
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(s.plain.Fd()), &r, &st, 0); err != nil {
		s.noCachestat.Store(true)
		return false
	}
	page := int64(os.Getpagesize())
	pages := (off+int64(n)+page-1)/page - off/page
	return int64(st.Cache) >= pages
}

func (s *sourceFile) Close() error {
	if s.direct != nil {
		s.direct.Close()
	}
	return s.plain.Close()
}

// extent is a range of the source that may hold data.
type extent struct{ off, end int64 }

// minHole is the shortest hole dataExtents leaves out: a shorter one is
// read (its zeros found by the encoder's scan), which bounds the list at
// one extent per MiB of the source.
const minHole = 1 << 20

// dataExtents lists the ranges of the source from off to its end that may
// hold data, in order: a file's, asked of its file system (SEEK_DATA and
// SEEK_HOLE), each widened to directAlign; a device's, or a file's whose
// file system cannot tell, the whole range. CDI's disk.img on a
// filesystem volume is sparse: its holes are never read.
func (s *sourceFile) dataExtents(off int64) []extent {
	whole := []extent{{off, s.size}}
	if off >= s.size {
		return nil
	}
	fd := int(s.plain.Fd())
	var out []extent
	for pos := off; pos < s.size; {
		data, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // a hole to the end
		}
		if err != nil {
			return whole
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil || hole <= data {
			return whole
		}
		start := max(data&^(directAlign-1), off)
		end := min((hole+directAlign-1)&^(directAlign-1), s.size)
		if n := len(out); n > 0 && start-out[n-1].end < minHole {
			out[n-1].end = max(out[n-1].end, end)
		} else {
			out = append(out, extent{start, end})
		}
		pos = hole
	}
	return out
}

// extentsReader reads the source's extents one after the other (for the
// read-ahead): every read starts on directAlign, as O_DIRECT asks.
func (s *sourceFile) extentsReader(extents []extent) io.Reader {
	r := &extentsReader{f: s, ext: extents}
	if len(extents) > 0 {
		r.pos = extents[0].off
	}
	return r
}

type extentsReader struct {
	f   *sourceFile
	ext []extent
	pos int64
}

func (r *extentsReader) Read(p []byte) (int, error) {
	for len(r.ext) > 0 && r.pos >= r.ext[0].end {
		if r.ext = r.ext[1:]; len(r.ext) > 0 {
			r.pos = r.ext[0].off
		}
	}
	if len(r.ext) == 0 {
		return 0, io.EOF
	}
	limit := r.ext[0].end - r.pos
	if r.ext[0].end == r.f.size {
		// The source's end: readAt may round the read up past it.
		limit = (limit + directAlign - 1) &^ (directAlign - 1)
	}
	n, err := r.f.readAt(p[:min(int64(len(p)), limit)], r.pos)
	r.pos += int64(n)
	switch {
	case n > 0:
		return n, nil
	case err == nil || err == io.EOF: //nolint:errorlint // ReadAt's own io.EOF
		return 0, io.ErrUnexpectedEOF // the source is shorter than it was
	}
	return 0, err
}
