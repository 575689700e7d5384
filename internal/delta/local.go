//go:build linux

package delta

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/volume"
)

// Pass is one pass's counts as the machinery keeps them, sender's and
// receiver's alike; importer.DeltaPass documents each for users, and
// clone-source prints the sender's under the same JSON names
// (importer's TestDeltaPassReportsThePassAsItWas holds the two to one
// JSON).
type Pass struct {
	Stats
	BaseDigest     string        `json:"baseDigest"`
	Digest         string        `json:"digest"`
	Final          bool          `json:"final"`
	Full           bool          `json:"full,omitempty"`
	Received       bool          `json:"received,omitempty"`
	TargetSize     int64         `json:"-"` // the device's, when larger (Result.TargetSize)
	WireBytes      int64         `json:"wireBytes"`
	SignatureBytes int64         `json:"signatureBytes,omitempty"`
	Resumes        int           `json:"resumes,omitempty"`
	Duration       time.Duration `json:"-"`
}

// OpenSource opens a clone source (a file or a device) for reading and
// returns its size.
func OpenSource(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("opening clone source %s: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("sizing clone source %s: %w", path, err)
	}
	return f, size, nil
}

// CheckBase refuses a target whose digest is not the base the sender
// named ("" names none: any target of the source's size is a base, the
// blocks being compared by content).
func CheckBase(target *Signature, base string) error {
	if base == "" {
		return nil
	}
	want, err := blkhash.ParseDigest(base)
	if err != nil {
		return err
	}
	if want != target.Digest {
		return fmt.Errorf("the target's content digest is %s, the base named is %s: %w", target.Digest, want, errdefs.ErrNoDeltaBase)
	}
	return nil
}

// LocalOptions tune a local pass.
type LocalOptions struct {
	// Base, when set, is the content digest the target must have (the
	// last pass's); another is no base.
	Base string
	// Expect, when set, is the content digest the source must have: the
	// pass fails before the target is finished otherwise.
	Expect string
	// Fit is how the target's size must match the source's: SameSize
	// (the zero value), or DevicePrefix for a block device as large or
	// larger, whose first bytes take the pass as a full clone's would.
	Fit    Fit
	Logger *slog.Logger
}

// Local runs a delta pass from the file or device src onto the file or
// device dst, which must hold an earlier copy (errdefs.ErrNoDeltaBase
// otherwise: the caller clones in full): OpenLocal's steps, in order.
func Local(ctx context.Context, src, dst string, o LocalOptions) (*Pass, error) {
	lp, err := OpenLocal(src, dst, o)
	if err != nil {
		return nil, err
	}
	defer lp.Close()
	if err := lp.Transfer(ctx); err != nil {
		return lp.Pass(), err
	}
	digest, err := lp.Check()
	if err != nil {
		return lp.Pass(), err
	}
	if err := blkhash.Expect(digest, o.Expect); err != nil {
		return lp.Pass(), err
	}
	if err := lp.Commit(); err != nil {
		return lp.Pass(), err
	}
	return lp.Pass(), nil
}

// LocalPass is a local pass as the steps a caller runs in order
// (Transfer, Check, Commit; Close at the end, whatever happened), each
// step a phase of the import engine's delta route. Compared, SourceRead
// and Written may be read from any goroutine while it runs.
type LocalPass struct {
	src    *os.File
	size   int64
	target *Target
	stamp  Stamp
	o      LocalOptions
	start  time.Time

	sig       *Signature // the source's, as sent once Transfer ended
	moved     bool       // the source changed between its signing and the runs
	unchanged func() (bool, error)
	stop      func()
	pass      Pass

	srcSigned, dstSigned, written atomic.Int64
}

// OpenLocal opens a local pass from src onto dst: the source for reading,
// the target claimed in place (OpenTargetFit with o.Fit: a target of
// another size, or none, is no base).
func OpenLocal(src, dst string, o LocalOptions) (*LocalPass, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	sf, size, err := OpenSource(src)
	if err != nil {
		return nil, err
	}
	if err := volume.RefuseSameVolume(src, dst); err != nil {
		sf.Close()
		return nil, fmt.Errorf("delta clone: %w", err)
	}
	t, err := OpenTargetFit(dst, size, o.Fit)
	if err != nil {
		sf.Close()
		return nil, err
	}
	return &LocalPass{src: sf, size: size, target: t, stamp: StampSource(sf), o: o, start: start, stop: func() {}}, nil
}

// Size is the volume's size.
func (lp *LocalPass) Size() int64 { return lp.size }

// Transfer signs both sides at once (as the two ends of a remote pass
// are), refuses a target that is not the base named, and writes the runs
// where they differ into the target; the source is signed again meanwhile
// where its stamp cannot tell whether it was written (Recheck).
func (lp *LocalPass) Transfer(ctx context.Context) error {
	type signed struct {
		s   *Signature
		err error
	}
	tc := make(chan signed, 1)
	go func() {
		s, err := lp.target.sign(ctx, &lp.dstSigned)
		tc <- signed{s, err}
	}()
	srcSig, serr := sign(ctx, lp.src, lp.size, &lp.srcSigned)
	tr := <-tc
	if tr.err != nil {
		return tr.err
	}
	if serr != nil {
		return serr
	}
	if err := CheckBase(tr.s, lp.o.Base); err != nil {
		return err
	}
	runs := Changes(srcSig, tr.s)
	lp.pass = Pass{Stats: Count(lp.size, runs), BaseDigest: tr.s.Digest.String(), TargetSize: lp.target.beyond()}
	lp.o.Logger.Info("Delta pass", "source", lp.src.Name(), "target", lp.target.path, "blocks", lp.pass.Blocks,
		"changed", lp.pass.BlocksChanged, "dataBytes", lp.pass.DataBytes, "zeroBytes", lp.pass.ZeroBytes)
	lp.unchanged, lp.stop = Recheck(ctx, lp.src, srcSig, lp.stamp)
	moved, err := Send(ctx, lp.src, srcSig, runs, 0, countingSink{lp.target, &lp.written})
	lp.sig, lp.moved = srcSig, moved
	return err
}

// Check compares the target's digest after the runs (its hashes, those
// of the runs) with the source's as sent, before the target's held ends
// are written, and waits for the recheck: the pass is final when the
// source held still. It returns the source's digest.
func (lp *LocalPass) Check() (blkhash.Digest, error) {
	if lp.sig == nil || lp.unchanged == nil {
		return blkhash.Digest{}, fmt.Errorf("checking a delta pass whose runs were not sent: %w", errdefs.ErrInvalidOptions)
	}
	got, err := lp.target.Verify(lp.sig.Digest)
	if err != nil {
		return got, err
	}
	same, err := lp.unchanged()
	if err != nil {
		return got, err
	}
	lp.pass.Final = same && !lp.moved
	return got, nil
}

// Commit writes the target's held ends once the rest is synced, and
// syncs them (Target.Commit): only then is the target a copy.
func (lp *LocalPass) Commit() error {
	if err := lp.target.Commit(); err != nil {
		return err
	}
	lp.pass.Digest = lp.sig.Digest.String()
	lp.pass.Duration = time.Since(lp.start)
	return nil
}

// Pass reports the pass so far.
func (lp *LocalPass) Pass() *Pass {
	p := lp.pass
	return &p
}

// Compared is how many bytes both sides have been signed over.
func (lp *LocalPass) Compared() int64 { return min(lp.srcSigned.Load(), lp.dstSigned.Load()) }

// SourceRead is how many bytes of the source were signed.
func (lp *LocalPass) SourceRead() int64 { return lp.srcSigned.Load() }

// Written is how many bytes of data runs reached the target.
func (lp *LocalPass) Written() int64 { return lp.written.Load() }

// Close ends the recheck and releases both sides. A target closed before
// Commit, once writing began, keeps its ends zeroed: no copy anything
// takes for done.
func (lp *LocalPass) Close() {
	lp.stop()
	lp.target.Close()
	lp.src.Close()
}

// countingSink counts the data bytes a Sink took.
type countingSink struct {
	Sink
	n *atomic.Int64
}

func (c countingSink) Data(off int64, p []byte) error {
	if err := c.Sink.Data(off, p); err != nil {
		return err
	}
	c.n.Add(int64(len(p)))
	return nil
}
