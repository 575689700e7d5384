package importer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/volume"
	"github.com/diskimport/engine/qemu"
)

const (
	verifyByDigest  = string(verifyDigests)
	verifyByCompare = string(verifyCompare)
)

// verification is Verify (request.Verify): it re-reads both sides after the
// copy. A raw copy is checked by hashing the source (decompressed again from
// the start) and the target's first BytesWritten bytes, both read from
// storage rather than from what the copy remembered. A converted image is
// checked by qemu-img compare, which reads the source through its format
// driver (the local file, or the scratch copy in still holds); the target's
// digest is still reported when the target is raw.
type verification struct {
	a  *attempt
	in *imageInput
}

func (v *verification) run(ctx context.Context) error {
	a := v.a
	n := a.result.BytesWritten
	a.log.Info("Verifying: reading back source and target", "bytes", n, "target", a.target.Path())
	start := time.Now()
	if a.plan.Verify == verifyDigests {
		if err := v.digests(ctx, n); err != nil {
			return err
		}
	} else {
		if err := v.compare(ctx, n); err != nil {
			return err
		}
	}
	a.result.Verified = true
	a.log.Info("Verified", "method", a.result.VerifyMethod, "sourceDigest", a.result.SourceDigest,
		"targetDigest", a.result.TargetDigest, "bytes", n, "seconds", time.Since(start).Seconds())
	return nil
}

func (v *verification) digests(ctx context.Context, n int64) error {
	a := v.a
	type sum struct {
		digest string
		err    error
	}
	srcC := make(chan sum, 1)
	go func() {
		d, err := v.sourceDigest(ctx, n)
		srcC <- sum{d, err}
	}()
	tgtDigest, terr := volume.ReadBackSHA256(ctx, a.target.WritePath(), n)
	s := <-srcC
	if s.err != nil {
		return fmt.Errorf("verify: re-reading source %s: %w", a.req.Source, s.err)
	}
	if terr != nil {
		return fmt.Errorf("verify: re-reading target %s: %w", a.target.Path(), terr)
	}
	a.result.VerifyMethod = verifyByDigest
	a.result.SourceDigest, a.result.TargetDigest = s.digest, tgtDigest
	if s.digest != tgtDigest {
		return &errdefs.VerifyError{Method: verifyByDigest, Bytes: n, SourceDigest: s.digest, TargetDigest: tgtDigest}
	}
	return nil
}

// sourceDigest hashes the first n bytes of the source's image stream, with
// compression peeled off again exactly as the import did.
func (v *verification) sourceDigest(ctx context.Context, n int64) (string, error) {
	st, err := datasource.NewFile(v.a.caps.LocalPath).Open(ctx)
	if err != nil {
		return "", err
	}
	defer st.Body.Close()
	img, err := format.Open(ctx, st.Body, format.Options{Logger: v.a.log, ForceRaw: v.a.req.FormatIn == formatInRaw})
	if err != nil {
		return "", err
	}
	defer img.Close()
	return iostage.SHA256Prefix(img, n)
}

// verifyCompare runs qemu-img compare between the source image (the local
// file itself when it was not compressed, else the scratch copy) and the
// target, the target limited to the image's size: a device larger than the
// image keeps its old bytes past the end, which are not part of the copy.
func (v *verification) compare(ctx context.Context, n int64) error {
	a := v.a
	src, srcFmt := v.in.path, v.in.format
	if len(a.plan.Compressions) == 0 && a.caps.LocalPath != "" {
		src, srcFmt = a.caps.LocalPath, a.plan.SourceFormat
	}
	if src == "" {
		return fmt.Errorf("verify: no local copy of the source to compare with: %w", errdefs.ErrInvalidOptions)
	}
	srcImg := qemu.CompareImage{Path: src, Format: srcFmt.QemuName()}
	tgtImg := qemu.CompareImage{Path: a.target.WritePath(), Format: a.plan.OutputFormat}
	if a.plan.OutputFormat == "raw" {
		tgtImg.Size = n
	}
	a.result.VerifyMethod = verifyByCompare
	out, err := v.runCompare(ctx, srcImg, tgtImg)
	if err != nil {
		return err
	}
	if a.plan.OutputFormat == "raw" {
		d, err := volume.ReadBackSHA256(ctx, a.target.WritePath(), n)
		if err != nil {
			return fmt.Errorf("verify: re-reading target %s: %w", a.target.Path(), err)
		}
		a.result.TargetDigest = d
	}
	a.log.Debug("qemu-img compare", "output", out)
	return nil
}

// runCompare runs qemu-img compare through the Runner (sandboxed, with
// limits). Identical: nil; different: a VerifyError; else qemu-img failed.
func (v *verification) runCompare(ctx context.Context, src, dst qemu.CompareImage) (string, error) {
	out, err := v.a.qemuImg().Compare(ctx, src, dst)
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("verify: qemu-img compare: %w: %w", errdefs.ErrCancelled, ctx.Err())
	}
	if errors.Is(err, qemu.ErrImagesDiffer) {
		return "", &errdefs.VerifyError{Method: verifyByCompare, Detail: out}
	}
	return "", fmt.Errorf("verify: %w", err)
}
