package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/ctxio"
	"github.com/diskimport/engine/qemu"
)

const (
	verifyByDigest  = string(VerifyDigests)
	verifyByCompare = string(VerifyCompare)
)

// verify re-reads both sides after the copy (Options.Verify). A raw copy is
// checked by hashing the source (decompressed again from the start) and the
// target's first BytesWritten bytes, both read from storage rather than from
// what the copy remembered. A converted image is checked by qemu-img
// compare, which reads the source through its format driver; the target's
// digest is still reported when the target is raw.
func (j *job) verify(ctx context.Context) error {
	n := j.result.BytesWritten
	j.log.Info("Verifying: reading back source and target", "bytes", n, "target", j.tgt.Path())
	start := time.Now()
	if j.plan.Verify == VerifyDigests {
		if err := j.verifyDigests(ctx, n); err != nil {
			return err
		}
	} else {
		if err := j.verifyCompare(ctx, n); err != nil {
			return err
		}
	}
	j.result.Verified = true
	j.log.Info("Verified", "method", j.result.VerifyMethod, "sourceDigest", j.result.SourceDigest,
		"targetDigest", j.result.TargetDigest, "bytes", n, "seconds", time.Since(start).Seconds())
	return nil
}

func (j *job) verifyDigests(ctx context.Context, n int64) error {
	type sum struct {
		digest string
		err    error
	}
	srcC := make(chan sum, 1)
	go func() {
		d, err := j.sourceDigest(ctx, n)
		srcC <- sum{d, err}
	}()
	tgtDigest, terr := readBackDigest(ctx, j.tgt.WritePath(), n)
	s := <-srcC
	if s.err != nil {
		return fmt.Errorf("verify: re-reading source %s: %w", j.source, s.err)
	}
	if terr != nil {
		return fmt.Errorf("verify: re-reading target %s: %w", j.tgt.Path(), terr)
	}
	j.result.VerifyMethod = verifyByDigest
	j.result.SourceDigest, j.result.TargetDigest = s.digest, tgtDigest
	if s.digest != tgtDigest {
		return &errdefs.VerifyError{Method: verifyByDigest, Bytes: n, SourceDigest: s.digest, TargetDigest: tgtDigest}
	}
	return nil
}

// sourceDigest hashes the first n bytes of the source's image stream, with
// compression peeled off again exactly as the import did.
func (j *job) sourceDigest(ctx context.Context, n int64) (string, error) {
	st, err := datasource.NewFile(j.localSource).Open(ctx)
	if err != nil {
		return "", err
	}
	defer st.Body.Close()
	img, err := format.Open(ctx, st.Body, format.Options{Logger: j.log})
	if err != nil {
		return "", err
	}
	defer img.Close()
	return hashPrefix(img, n)
}

// readBackDigest hashes the first n bytes of path after flushing it and
// dropping its cached pages, so the bytes come from the device or disk and
// not from the page cache the copy filled.
func readBackDigest(ctx context.Context, path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := unix.Fsync(int(f.Fd())); err != nil {
		return "", fmt.Errorf("fsync %s: %w", path, err)
	}
	// Advisory: a kernel that keeps the pages only makes the check weaker.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return hashPrefix(ctxio.NewReader(ctx, "", f), n)
}

func hashPrefix(r io.Reader, n int64) (string, error) {
	h := sha256.New()
	got, err := io.CopyBuffer(h, io.LimitReader(r, n), make([]byte, 1<<20))
	if err != nil {
		return "", err
	}
	if got != n {
		return "", fmt.Errorf("only %d of %d bytes could be read: %w", got, n, errdefs.ErrTargetTooSmall)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// verifyCompare runs qemu-img compare between the source image (the local
// file itself when it was not compressed, else the scratch copy) and the
// target, the target limited to the image's size: a device larger than the
// image keeps its old bytes past the end, which are not part of the copy.
func (j *job) verifyCompare(ctx context.Context, n int64) error {
	src, srcFmt := j.convertSrc, j.plan.ConvertFormat
	if len(j.plan.Compressions) == 0 && j.localSource != "" {
		src, srcFmt = j.localSource, j.plan.SourceFormat
	}
	if src == "" {
		return fmt.Errorf("verify: no local copy of the source to compare with: %w", errdefs.ErrInvalidOptions)
	}
	srcImg := qemu.CompareImage{Path: src, Format: srcFmt.QemuName()}
	tgtImg := qemu.CompareImage{Path: j.tgt.WritePath(), Format: j.plan.OutputFormat}
	if j.plan.OutputFormat == "raw" {
		tgtImg.Size = n
	}
	j.result.VerifyMethod = verifyByCompare
	out, err := j.runCompare(ctx, srcImg, tgtImg)
	if err != nil {
		return err
	}
	if j.plan.OutputFormat == "raw" {
		d, err := readBackDigest(ctx, j.tgt.WritePath(), n)
		if err != nil {
			return fmt.Errorf("verify: re-reading target %s: %w", j.tgt.Path(), err)
		}
		j.result.TargetDigest = d
	}
	j.log.Debug("qemu-img compare", "output", out)
	return nil
}

// runCompare runs qemu-img compare through the Runner (sandboxed, with
// limits). Identical: nil; different: a VerifyError; else qemu-img failed.
func (j *job) runCompare(ctx context.Context, src, dst qemu.CompareImage) (string, error) {
	out, err := j.qemu.Compare(ctx, src, dst)
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
