package cloner

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/buffers"
)

// directAlign is the alignment of O_DIRECT reads: buffer, offset and
// length (4 KiB serves 512-byte and 4 KiB logical blocks alike).
const directAlign = 4096

// sourceFile is a clone's source read with O_DIRECT where its kernel and
// file system take it: the bytes then reach the buffer without a copy
// through the page cache, which a pod's memory limit also counts (a
// volume larger than the pod's 600M limit streamed through it). Measured
// on a 2 GiB loop device, 35 % data: the cloner's system CPU 0.59-0.61 s
// buffered, 0.32-0.40 s direct. A read O_DIRECT refuses (EINVAL: a file
// system that takes the flag at open but not the read) goes on buffered.
type sourceFile struct {
	f      *os.File
	path   string
	size   int64
	direct bool
}

// openSourceFile opens the clone source at path, with O_DIRECT when it
// can.
func openSourceFile(path string) (*sourceFile, error) {
	f, size, err := openDevice(path)
	if err != nil {
		return nil, err
	}
	s := &sourceFile{f: f, path: path, size: size}
	if d, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0); err == nil {
		f.Close()
		s.f, s.direct = d, true
	}
	return s, nil
}

// chunkBuffer is a buffer of n bytes that readAt takes.
func (s *sourceFile) chunkBuffer(n int) []byte { return buffers.Aligned(n, directAlign) }

// readAt reads min(len(p), size-off) bytes at off into p (from
// chunkBuffer; off a multiple of directAlign while reading direct) and
// returns how many it read.
func (s *sourceFile) readAt(p []byte, off int64) (int, error) {
	want := int(min(int64(len(p)), s.size-off))
	if s.direct {
		// The length rounded up to the alignment: the source ends
		// before it, and the read stops there.
		n, err := s.f.ReadAt(p[:min(len(p), (want+directAlign-1)&^(directAlign-1))], off)
		if n >= want {
			return want, nil // the end of the source within the rounding
		}
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		if err := s.buffered(); err != nil {
			return 0, err
		}
	}
	return s.f.ReadAt(p[:want], off)
}

// buffered reopens the source without O_DIRECT.
func (s *sourceFile) buffered() error {
	f, err := os.OpenFile(s.path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening clone source %s: %w", s.path, err)
	}
	s.f.Close()
	s.f, s.direct = f, false
	return nil
}

func (s *sourceFile) Close() error { return s.f.Close() }
