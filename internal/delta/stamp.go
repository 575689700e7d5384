//go:build linux

package delta

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// stampQuiet is how long a file must have gone unwritten before its
// stamp is trusted: the kernel sets ctime from a clock that advances a
// tick at a time (4 ms at HZ=250, 10 ms at HZ=100), so a write within the
// tick of the stamp could leave ctime as it was; once ctime is older than
// this, every later write moves it.
const stampQuiet = 50 * time.Millisecond

// Stamp is what the kernel changes on any write to a regular file: its
// size and its change time (which a write, a truncate or a set of its
// mtime all move). The zero Stamp is not trusted.
type Stamp struct {
	ok       bool
	ino, dev uint64
	size     int64
	ctime    unix.Timespec
}

// StampSource takes f's stamp, before a pass first reads it. A device has
// none (its writes change nothing the inode shows), nor a file written in
// the last stampQuiet: the pass then reads the source again to tell
// whether it was final.
func StampSource(f *os.File) Stamp {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Stamp{}
	}
	if time.Since(time.Unix(st.Ctim.Unix())) < stampQuiet {
		return Stamp{}
	}
	return Stamp{ok: true, ino: st.Ino, dev: st.Dev, size: st.Size, ctime: st.Ctim}
}

// unchangedSince reports whether f still has stamp s (false when s is not
// trusted).
func (s Stamp) unchangedSince(f *os.File) bool {
	return s.ok && StampSource(f) == s
}

// Trusted reports whether s can tell a write: Recheck then reads nothing.
func (s Stamp) Trusted() bool { return s.ok }
