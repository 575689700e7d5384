package importer

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/delta"
)

// DeltaPass reports one delta pass: the blocks compared and changed, the
// bytes sent, the content digests before and after, and whether the pass
// was final (the source unchanged while it ran).
type DeltaPass = delta.Pass

// deltaClone runs Options.Delta's pass, or returns an error matching
// errdefs.ErrNoDeltaBase when the clone must be a full one: the source is
// not the raw bytes of a local file or device, the target is not raw
// bytes of the same size, or it is not the named base.
func deltaClone(ctx context.Context, o Options) (*Result, error) {
	res := &Result{Target: o.Target}
	switch {
	case o.Source == "" || o.Source == "-" || o.CustomSource != nil:
		return res, fmt.Errorf("a delta pass needs a local file or device source: %w", errdefs.ErrNoDeltaBase)
	case o.ContentType == ContentTypeArchive || o.Format == "qcow2" || o.Size > 0:
		return res, fmt.Errorf("a delta pass copies raw bytes onto a target of the source's size (no archive, qcow2 or --size): %w", errdefs.ErrNoDeltaBase)
	}
	if fi, err := os.Stat(o.Source); err != nil || !(fi.Mode().IsRegular() || fi.Mode()&os.ModeDevice != 0) {
		return res, fmt.Errorf("a delta pass needs a local file or device source: %w", errdefs.ErrNoDeltaBase)
	}
	if o.ContentType != ContentTypeAsIs && o.FormatIn == "" {
		if f, err := rawBytes(o.Source); err != nil || f != format.Raw {
			return res, fmt.Errorf("a delta pass copies a raw source as it is, and %s is %s: %w", o.Source, f, errdefs.ErrNoDeltaBase)
		}
	}
	target := delta.TargetPath(o.Target)
	start := time.Now()
	p, err := delta.Local(ctx, o.Source, target, delta.LocalOptions{Base: o.DeltaBase, Expect: o.ExpectContentDigest, Logger: o.logger()})
	if err != nil {
		return res, err
	}
	return NewDeltaResult(target, p, time.Since(start)), nil
}

// NewDeltaResult is the Result of a completed delta pass onto target:
// the disk's size as read and written (BytesWritten, as for any clone),
// the bytes the pass wrote (DataBytes), the content digest the target's
// block hashes gave, verified against the source's.
func NewDeltaResult(target string, p *DeltaPass, took time.Duration) *Result {
	return &Result{
		Complete: true, Target: target, SourceFormat: string(format.Raw),
		VirtualSize: p.Size, TargetSize: p.Size, BytesWritten: p.Size, BytesRead: p.Size, DataBytes: p.DataBytes,
		ContentDigest: p.Digest, SourceDigest: p.Digest, TargetDigest: p.Digest,
		Verified: true, VerifyMethod: "delta pass: the target's block hashes after the pass against the source's (content digest)",
		Duration: took, Delta: p,
	}
}

// rawBytes sniffs the head of a local source: raw and iso are copied as
// they are; anything else is converted, never passed as a delta.
func rawBytes(path string) (format.Format, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, format.DefaultPeekSize)
	n, _ := f.ReadAt(head, 0)
	c, fm, err := format.Detect(head[:n])
	if err != nil || c != format.None {
		return "compressed", err
	}
	if !fm.NeedsConversion() {
		fm = format.Raw
	}
	return fm, nil
}
