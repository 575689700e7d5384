//go:build linux

package delta

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/blockdev"
)

// Pass reports one delta pass.
type Pass struct {
	Stats
	// BaseDigest is the target's content digest before the pass; Digest
	// the source's as sent, which the target has after it.
	BaseDigest string `json:"baseDigest"`
	Digest     string `json:"digest"`
	// Final: the source was signed again after the pass and had not
	// changed, so the target is a consistent copy of a quiesced source.
	// A pass of a source in use is a warm pass: its target is the source
	// as read, blocks of different moments, to be followed by another.
	Final bool `json:"final"`
	// Full: the target was no base (a filesystem volume whose digest is
	// not the base named): every file was sent whole.
	Full bool `json:"full,omitempty"`
	// Received marks the receiving end's report of a pass over the wire:
	// whether it was final only the sender can tell (Final is false).
	Received bool `json:"received,omitempty"`
	// WireBytes counts what crossed the wire (signature and runs; 0 for a
	// local pass), SignatureBytes the signature's part of it.
	WireBytes      int64 `json:"wireBytes"`
	SignatureBytes int64 `json:"signatureBytes,omitempty"`
	// Resumes counts requests that resumed a dropped one.
	Resumes  int           `json:"resumes,omitempty"`
	Duration time.Duration `json:"-"`
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
	Logger *slog.Logger
}

// Local runs a delta pass from the file or device src onto the file or
// device dst, which must hold an earlier copy (errdefs.ErrNoDeltaBase
// otherwise: the caller clones in full).
func Local(ctx context.Context, src, dst string, o LocalOptions) (*Pass, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	sf, size, err := OpenSource(src)
	if err != nil {
		return nil, err
	}
	defer sf.Close()
	if same, err := sameFile(sf, dst); err != nil || same {
		if err == nil {
			err = fmt.Errorf("delta clone of %s onto itself: %w", src, errdefs.ErrInvalidOptions)
		}
		return nil, err
	}
	t, err := OpenTarget(dst, size)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	stamp := StampSource(sf)
	// Both sides are read at once, as the two ends of a remote pass are.
	type signed struct {
		s   *Signature
		err error
	}
	tc := make(chan signed, 1)
	go func() {
		s, err := t.Sign(ctx)
		tc <- signed{s, err}
	}()
	srcSig, serr := Sign(ctx, sf, size)
	tr := <-tc
	if tr.err != nil {
		return nil, tr.err
	}
	if serr != nil {
		return nil, serr
	}
	if err := CheckBase(tr.s, o.Base); err != nil {
		return nil, err
	}
	runs := Changes(srcSig, tr.s)
	p := &Pass{Stats: Count(size, runs), BaseDigest: tr.s.Digest.String()}
	log.Info("Delta pass", "source", src, "target", dst, "blocks", p.Blocks, "changed", p.BlocksChanged, "dataBytes", p.DataBytes, "zeroBytes", p.ZeroBytes)
	unchanged, stop := Recheck(ctx, sf, srcSig, stamp)
	defer stop()
	moved, err := Send(ctx, sf, srcSig, runs, 0, t)
	if err != nil {
		return p, err
	}
	if err := blkhash.Expect(srcSig.Digest, o.Expect); err != nil {
		return p, err
	}
	if _, err := t.Finish(srcSig.Digest); err != nil {
		return p, err
	}
	p.Digest = srcSig.Digest.String()
	same, err := unchanged()
	if err != nil {
		return p, err
	}
	p.Final = same && !moved
	p.Duration = time.Since(start)
	return p, nil
}

// sameFile reports whether path is the file f has open.
func sameFile(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Stat(path)
	if err != nil {
		return false, nil // no target: OpenTarget says it is no base
	}
	return os.SameFile(a, b) || blockdev.SameDevice(a, b), nil
}
