//go:build linux

package delta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/blockdev"
	"github.com/diskimport/engine/internal/volume"
)

// heldSize is how much of each end of the target a pass holds in memory
// until it is complete: a partition table, a boot sector and a backup GPT
// all lie within it, as the import's wipe of a device's head assumes.
const heldSize = 1 << 20

// Target is a delta pass's receiving end: the volume written in place.
// Its methods are for one goroutine.
type Target struct {
	f     *os.File
	path  string
	block bool
	// zero makes f's ranges read zeros (nil while detached); lbs is the
	// alignment it needs (a device's logical block size, 1 for a file).
	zero *volume.Zeroer
	lbs  int64
	size int64
	// capacity is a device's size when it is larger than the volume (a
	// DevicePrefix target), else size; beyondCleared: the part past the
	// volume was made what a full clone leaves there (clearBeyond).
	capacity      int64
	beyondCleared bool
	sig           *Signature
	// held are the target's two ends, in memory from the first write to
	// Finish, while the target holds zeros there.
	held []held
	// offset: every run before it was applied (a resumed pass goes on
	// from there).
	offset   int64
	finished bool
	// pass is what the runs applied so far amount to.
	pass Pass
	// ino and dev name a file target's inode, so that its file opened
	// again after detach is known to be the same.
	ino, dev uint64
}

type held struct {
	off int64
	buf []byte
}

// Fit is how a volume target's size must match its source's.
type Fit int

const (
	// SameSize: the target has the source's size (a local pass, or a
	// server asked for the exact size).
	SameSize Fit = iota
	// DevicePrefix: a block device may be larger than the source, as a
	// full clone onto it may be (a filesystem volume's disk.img onto the
	// block volume of a storage migration, which the storage rounds up).
	// The pass is of its first size bytes; the rest reads as a full
	// clone leaves it: as it lies, but for an old image's GPT backup
	// header in the device's last sector, whose last MiB is zeroed before
	// the first write (volume.BackupGPTAtEnd, as the import's writers of
	// a device do). A file must still have the source's size.
	DevicePrefix
)

// takes is the size rule: whether a volume of have bytes (block: a block
// device) may take a pass of a source of size bytes.
func (fit Fit) takes(block bool, have, size int64) bool {
	if fit == DevicePrefix && block {
		return have >= size
	}
	return have == size
}

// OpenTarget opens the existing volume at path (a device, claimed
// exclusively, or a file, locked) to take a delta pass of a source of
// size bytes. A target of another size, or none, is no base
// (errdefs.ErrNoDeltaBase).
func OpenTarget(path string, size int64) (*Target, error) {
	return OpenTargetFit(path, size, SameSize)
}

// OpenTargetFit is OpenTarget with the size rule fit: with DevicePrefix
// a block device of at least size bytes is a base too.
func OpenTargetFit(path string, size int64, fit Fit) (*Target, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("delta target %s: %w: %w", path, err, errdefs.ErrNoDeltaBase)
	}
	block := fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
	var f *os.File
	switch {
	case block:
		f, err = blockdev.OpenExclusive(path, unix.O_RDWR)
	case fi.Mode().IsRegular():
		f, err = os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	default:
		return nil, fmt.Errorf("delta target %s is neither a block device nor a regular file: %w", path, errdefs.ErrNoDeltaBase)
	}
	if err != nil {
		return nil, fmt.Errorf("opening delta target %s: %w: %w", path, err, errdefs.ErrNoDeltaBase)
	}
	if block {
		return newTarget(f, path, true, size, fit)
	}
	return OpenTargetFile(f, path, size)
}

// OpenTargetFile takes the regular file f, open for reading and writing,
// as a pass's target (named name in messages), locked against a second
// pass; it is closed on failure. A file of another size is no base.
func OpenTargetFile(f *os.File, name string, size int64) (*Target, error) {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("delta target %s is being written by another pass: %w", name, errdefs.ErrTargetBusy)
	}
	return newTarget(f, name, false, size, SameSize)
}

func newTarget(f *os.File, name string, block bool, size int64, fit Fit) (*Target, error) {
	have, err := f.Seek(0, io.SeekEnd)
	switch {
	case err != nil:
	case fit.takes(block, have, size):
	case have < size:
		err = fmt.Errorf("delta target %s has %d bytes, less than the source's %d: %w", name, have, size, errdefs.ErrNoDeltaBase)
	default:
		err = fmt.Errorf("delta target %s has %d bytes, the source %d: %w", name, have, size, errdefs.ErrNoDeltaBase)
	}
	if err != nil {
		f.Close()
		if !errors.Is(err, errdefs.ErrNoDeltaBase) {
			err = fmt.Errorf("sizing delta target %s: %w: %w", name, err, errdefs.ErrNoDeltaBase)
		}
		return nil, err
	}
	t := &Target{f: f, path: name, block: block, size: size, capacity: have, lbs: 1}
	if block {
		lbs, err := blockdev.LogicalBlockSize(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("delta target %s: %w", name, err)
		}
		t.lbs = int64(lbs)
	}
	t.zero = volume.NewZeroer(f, name, nil)
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil {
		t.ino, t.dev = st.Ino, st.Dev
	}
	return t, nil
}

// detach closes the target's file, keeping all the pass knows of it (its
// signature, held ends, offset): a pass over a volume's files keeps open
// only the one it works on. Its lock goes with it; reattach takes both
// again.
func (t *Target) detach() error {
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f, t.zero = nil, nil
	return err
}

// reattach gives a detached file target f, its file opened again for
// reading and writing, and locks it as OpenTargetFile does. Another file
// under its name (replaced during the pass) is refused; f is closed on
// failure.
func (t *Target) reattach(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != t.ino || st.Dev != t.dev {
		f.Close()
		return fmt.Errorf("delta target %s was replaced during the pass: %w", t.path, errdefs.ErrTargetBusy)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("delta target %s is being written by another pass: %w", t.path, errdefs.ErrTargetBusy)
	}
	t.f, t.zero = f, volume.NewZeroer(f, t.path, nil)
	return nil
}

// File is the target's open file (to set a file's mode and owner).
func (t *Target) File() *os.File { return t.f }

// Size is the volume's size.
func (t *Target) Size() int64 { return t.size }

// Offset is where a resumed pass goes on: every run before it was
// applied.
func (t *Target) Offset() int64 { return t.offset }

// Sign reads the target and returns its signature; a target that cannot
// be read is no base.
func (t *Target) Sign(ctx context.Context) (*Signature, error) {
	return t.sign(ctx, nil)
}

// sign is Sign advancing covered (when not nil) by the bytes signed.
func (t *Target) sign(ctx context.Context, covered *atomic.Int64) (*Signature, error) {
	s, err := sign(ctx, t.f, t.size, covered)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("signing delta target %s: %w: %w", t.path, err, errdefs.ErrNoDeltaBase)
	}
	t.sig = &Signature{Size: s.Size, Sums: append([]blkhash.Sum(nil), s.Sums...), Digest: s.Digest}
	t.pass = Pass{Stats: Stats{Size: t.size, Blocks: Blocks(t.size)}, BaseDigest: s.Digest.String(), TargetSize: t.beyond()}
	return s, nil
}

// adopt takes s as the target's signature without reading it (a file
// the caller just made, of zeros).
func (t *Target) adopt(s *Signature) {
	t.sig = s
	t.pass = Pass{Stats: Stats{Size: t.size, Blocks: Blocks(t.size)}, BaseDigest: s.Digest.String(), TargetSize: t.beyond()}
}

// Signed is the target's signature while no run was applied (a
// signature asked for again, its first answer cut off, is this one), nil
// after. The caller only reads it.
func (t *Target) Signed() *Signature {
	if t.sig == nil || t.held != nil || t.offset != 0 || t.finished {
		return nil
	}
	return t.sig
}

// hold reads the target's ends into memory and zeroes them on the target,
// durably, before the first write of a pass.
func (t *Target) hold() error {
	if t.held != nil {
		return nil
	}
	head := min(heldSize, t.size)
	ends := []held{{0, make([]byte, head)}}
	if tail := max(head, t.size-heldSize); tail < t.size {
		ends = append(ends, held{tail, make([]byte, t.size-tail)})
	}
	for _, h := range ends {
		if _, err := t.f.ReadAt(h.buf, h.off); err != nil {
			return fmt.Errorf("reading %d bytes of delta target %s at %d: %w", len(h.buf), t.path, h.off, err)
		}
	}
	for _, h := range ends {
		if err := t.zeroRange(h.off, int64(len(h.buf))); err != nil {
			return err
		}
	}
	if err := t.clearBeyond(); err != nil {
		return err
	}
	if err := unix.Fdatasync(int(t.f.Fd())); err != nil {
		return fmt.Errorf("fsync delta target %s after zeroing its ends: %w", t.path, err)
	}
	t.held = ends
	return nil
}

// beyond is the device's size where it is larger than the volume, else 0.
func (t *Target) beyond() int64 {
	if t.capacity > t.size {
		return t.capacity
	}
	return 0
}

// beyondPending: the device is larger than the volume and clearBeyond
// has not run yet.
func (t *Target) beyondPending() bool { return !t.beyondCleared && t.capacity > t.size }

// clearBeyond makes the device past the volume (a DevicePrefix target
// larger than its source) what a full clone onto it leaves: when its last
// sector holds a GPT backup header, an old image's, its last MiB is
// zeroed (the part of it inside the volume is the held tail's, in
// memory); the rest stays as it lies. It runs once, before the first
// write or, when no run changed anything, at Commit; the caller syncs.
func (t *Target) clearBeyond() error {
	if !t.beyondPending() {
		return nil
	}
	backup, err := volume.BackupGPTAtEnd(t.f, t.capacity)
	if err != nil {
		return fmt.Errorf("delta target %s: %w", t.path, err)
	}
	if backup && t.capacity > heldSize {
		from := max(t.size, t.capacity-heldSize)
		if err := t.zeroRange(from, t.capacity-from); err != nil {
			return err
		}
	}
	t.beyondCleared = true
	return nil
}

// check refuses a run the pass cannot take: out of order, not on block
// boundaries, past the end.
func (t *Target) check(off, n int64) error {
	switch {
	case t.sig == nil || t.finished:
		return fmt.Errorf("delta run at %d on a target not signed or already finished: %w", off, errdefs.ErrInvalidImage)
	case off < t.offset || off%BlockSize != 0 || n <= 0 || n > t.size-off:
		return fmt.Errorf("delta run of %d bytes at %d (applied up to %d of %d): %w", n, off, t.offset, t.size, errdefs.ErrInvalidImage)
	case n%BlockSize != 0 && off+n != t.size:
		return fmt.Errorf("delta run of %d bytes at %d ends inside a block: %w", n, off, errdefs.ErrInvalidImage)
	}
	return t.hold()
}

// Data writes the source's bytes p at off.
func (t *Target) Data(off int64, p []byte) error {
	if err := t.check(off, int64(len(p))); err != nil {
		return err
	}
	copy(t.sig.Sums[off/BlockSize:], blkhash.SumBlocks(p, 0))
	for _, r := range t.split(off, int64(len(p)), p) {
		if _, err := t.f.WriteAt(p[r.Off-off:r.Off-off+r.Len], r.Off); err != nil {
			return fmt.Errorf("writing delta target %s at %d: %w", t.path, r.Off, err)
		}
	}
	t.offset = off + int64(len(p))
	t.pass.BlocksChanged += Blocks(int64(len(p)))
	t.pass.DataBytes += int64(len(p))
	return nil
}

// Zero makes the n bytes at off zeros.
func (t *Target) Zero(off, n int64) error {
	if err := t.check(off, n); err != nil {
		return err
	}
	zero := blkhash.ZeroBlockSum()
	for b := off / BlockSize; b < Blocks(off+n); b++ {
		t.sig.Sums[b] = zero
	}
	if last := Blocks(off+n) - 1; off+n == t.size && t.size%BlockSize != 0 {
		t.sig.Sums[last] = blkhash.SumBlocks(make([]byte, t.size%BlockSize), 1)[0]
	}
	for _, r := range t.split(off, n, nil) {
		if err := t.zeroRange(r.Off, r.Len); err != nil {
			return err
		}
	}
	t.offset = off + n
	t.pass.BlocksChanged += Blocks(n)
	t.pass.ZeroBytes += n
	return nil
}

// split applies the part of the run [off, off+n) that falls in the held
// ends to memory (the bytes of p, or zeros when p is nil) and returns the
// parts left for the target.
func (t *Target) split(off, n int64, p []byte) []Run {
	rest := []Run{{Off: off, Len: n}}
	for _, h := range t.held {
		end := h.off + int64(len(h.buf))
		var next []Run
		for _, r := range rest {
			lo, hi := max(r.Off, h.off), min(r.Off+r.Len, end)
			if lo >= hi {
				next = append(next, r)
				continue
			}
			if p != nil {
				copy(h.buf[lo-h.off:hi-h.off], p[lo-off:hi-off])
			} else {
				clear(h.buf[lo-h.off : hi-h.off])
			}
			if r.Off < lo {
				next = append(next, Run{Off: r.Off, Len: lo - r.Off})
			}
			if hi < r.Off+r.Len {
				next = append(next, Run{Off: hi, Len: r.Off + r.Len - hi})
			}
		}
		rest = next
	}
	return rest
}

// zeroRange makes [off, off+n) zeros on the target, by the import's one
// way (volume.Zeroer: a hole punched where the target takes it, else a
// zero-out, else written zeros); the part of a device's block at either
// end of the range is written as zeros.
func (t *Target) zeroRange(off, n int64) error {
	end := off + n
	first := min((off+t.lbs-1)/t.lbs*t.lbs, end)
	last := max(end/t.lbs*t.lbs, first)
	err := t.zero.WriteZeros(t.f, off, first-off)
	if err == nil && last > first {
		err = t.zero.Zero(first, last-first, true, false)
	}
	if err == nil {
		err = t.zero.WriteZeros(t.f, last, end-last)
	}
	if err != nil {
		return fmt.Errorf("zeroing delta target %s [%d, +%d): %w", t.path, off, n, err)
	}
	return nil
}

// Finish completes the pass: the target's digest (its hashes, those of
// the runs applied) must be want, the source's as sent; then the rest is
// synced, the held ends written and synced. Only then is the target a
// copy of the source.
func (t *Target) Finish(want blkhash.Digest) (blkhash.Digest, error) {
	got, err := t.Verify(want)
	if err != nil {
		return got, err
	}
	return got, t.Commit()
}

// Verify returns the target's digest after the runs applied so far, and
// an ErrVerifyMismatch unless it is want, the source's as sent.
func (t *Target) Verify(want blkhash.Digest) (blkhash.Digest, error) {
	got, err := t.Digest()
	if err == nil && got != want {
		err = &errdefs.VerifyError{Method: "delta pass", Detail: fmt.Sprintf("the target's content digest after the pass is %s, the source's %s", got, want)}
	}
	return got, err
}

// Digest is the target's content digest after the runs applied so far:
// its hashes, those of the runs.
func (t *Target) Digest() (blkhash.Digest, error) {
	if t.sig == nil {
		return blkhash.Digest{}, fmt.Errorf("finishing a delta target that was not signed: %w", errdefs.ErrInvalidOptions)
	}
	return blkhash.DigestOfSums(t.sig.Sums, t.size), nil
}

// Commit completes a pass whose digest was checked: the rest is synced,
// the held ends written and synced. Only then is the target a copy of
// the source.
func (t *Target) Commit() error {
	got, err := t.Digest()
	if err != nil {
		return err
	}
	t.finished = true
	t.pass.Digest = got.String()
	if t.held == nil {
		// Nothing written in the volume; past it, a device may still
		// hold what a full clone would have zeroed.
		if !t.beyondPending() {
			return nil
		}
		if err := t.clearBeyond(); err != nil {
			return err
		}
		if err := unix.Fdatasync(int(t.f.Fd())); err != nil {
			return fmt.Errorf("fsync delta target %s: %w", t.path, err)
		}
		return nil
	}
	if err := unix.Fdatasync(int(t.f.Fd())); err != nil {
		return fmt.Errorf("fsync delta target %s: %w", t.path, err)
	}
	for _, h := range t.held {
		if _, err := t.f.WriteAt(h.buf, h.off); err != nil {
			return fmt.Errorf("writing the ends of delta target %s: %w", t.path, err)
		}
	}
	if err := unix.Fdatasync(int(t.f.Fd())); err != nil {
		return fmt.Errorf("fsync delta target %s: %w", t.path, err)
	}
	return nil
}

// Pass reports the runs applied and, once finished, the digest.
func (t *Target) Pass() Pass { return t.pass }

// Close releases the target. Before Finish, writing may have begun: its
// ends are then left zeroed, so it is no copy anything takes for done.
func (t *Target) Close() error { return t.detach() }

// TargetState is what a pass's target holds as it lies, read without
// claiming it: whether it exists, whether it is a volume a pass writes in
// place (a block device or a regular file), whether it is a block device,
// and its size.
type TargetState struct {
	Exists, Volume, Block bool
	Size                  int64
}

// Takes is whether the volume may take a pass of a source of size bytes
// under the size rule fit (OpenTargetFit's).
func (s TargetState) Takes(size int64, fit Fit) bool {
	return s.Volume && fit.takes(s.Block, s.Size, size)
}

// StatTarget reads the state of the volume at path (TargetPath's). A
// path that cannot be read as one is no volume.
func StatTarget(path string) TargetState {
	fi, err := os.Stat(path)
	if err != nil {
		return TargetState{}
	}
	s := TargetState{Exists: true}
	switch {
	case fi.Mode().IsRegular():
		s.Volume, s.Size = true, fi.Size()
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return s
		}
		defer f.Close()
		if s.Size, err = f.Seek(0, io.SeekEnd); err == nil {
			s.Volume, s.Block = true, true
		}
	}
	return s
}

// TargetPath is the volume a target path names: a directory's disk.img
// (CDI's filesystem-volume layout, as an import writes it), else itself.
func TargetPath(path string) string {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return filepath.Join(path, volume.DefaultFileName)
	}
	return path
}
