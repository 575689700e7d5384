package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/types"

	"github.com/diskimport/engine/errdefs"
)

// resumingBlob is a layer blob that survives broken transfers.
//
// containers/image's docker transport already resumes a blob read once
// with "Range: bytes=N-" after an unexpected EOF or a connection reset,
// but only under a heuristic (the first time, then only after 1 MiB of
// progress or a minute), only when the server answers 206, never after
// other errors, and never for a failed GetBlob itself. When its reader
// gives up, this one asks GetBlob for the blob again and skips the bytes
// already delivered: GetBlob takes no range, and its ranged sibling
// (GetBlobAt) is behind a private interface. The skipped bytes are not
// hashed a second time; the layer's digest check over everything delivered
// still covers the whole blob, so a blob that changed under us fails the
// import rather than splicing two versions.
type resumingBlob struct {
	ctx     context.Context
	src     types.ImageSource
	info    types.BlobInfo
	cache   types.BlobInfoCache
	ref     string
	policy  retryPolicy
	retries *atomic.Int64 // the source's, across every Open
	log     *slog.Logger

	rc      io.ReadCloser // nil between a failure and the next reopen
	off     int64         // bytes delivered to the reader
	pending error         // the failure that closed rc, retried on the next Read

	streakStart time.Time // first failure since bytes last flowed
	delay       time.Duration
}

// openBlob opens info's blob, retrying transient failures of the request
// itself.
func openBlob(ctx context.Context, src types.ImageSource, info types.BlobInfo, cache types.BlobInfoCache,
	ref string, policy retryPolicy, retries *atomic.Int64, log *slog.Logger,
) (*resumingBlob, error) {
	b := &resumingBlob{ctx: ctx, src: src, info: info, cache: cache, ref: ref, policy: policy, retries: retries, log: log}
	for {
		err := b.reopen()
		if err == nil {
			return b, nil
		}
		if werr := b.wait(err); werr != nil {
			return nil, werr
		}
	}
}

// reopen fetches the blob from its start and discards what was already
// delivered.
func (b *resumingBlob) reopen() error {
	rc, _, err := b.src.GetBlob(b.ctx, b.info, b.cache)
	if err != nil {
		return fmt.Errorf("fetching layer %s: %w", b.info.Digest, err)
	}
	if b.off > 0 {
		if _, err := io.CopyN(io.Discard, rc, b.off); err != nil {
			rc.Close()
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // shorter than what we already had
			}
			return fmt.Errorf("fetching layer %s again, skipping to byte %d: %w", b.info.Digest, b.off, err)
		}
	}
	b.rc = rc
	return nil
}

func (b *resumingBlob) Read(p []byte) (int, error) {
	for {
		if b.rc == nil {
			if err := b.wait(b.pending); err != nil {
				return 0, err
			}
			if err := b.reopen(); err != nil {
				b.pending = err
				continue
			}
		}
		n, err := b.rc.Read(p)
		b.off += int64(n)
		if n > 0 {
			b.streakStart = time.Time{} // bytes flow again: a new streak later
		}
		if err == nil || err == io.EOF {
			return n, err
		}
		if b.ctx.Err() != nil {
			return n, err
		}
		b.rc.Close()
		b.rc, b.pending = nil, err
		if n > 0 {
			return n, nil // deliver these; the next Read retries
		}
	}
}

// wait decides whether cause may be retried, and sleeps the jittered,
// doubling backoff. It returns nil to try again, or the error to give up
// with.
func (b *resumingBlob) wait(cause error) error {
	if err := b.ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
	}
	if permanentBlobError(cause) {
		return cause
	}
	p := b.policy
	now := time.Now()
	if b.streakStart.IsZero() {
		b.streakStart, b.delay = now, p.backoff
	}
	done := int(b.retries.Load())
	if p.max < 0 {
		return cause
	}
	if done >= p.max {
		return fmt.Errorf("%w (gave up after %d retries)", cause, done)
	}
	d := b.delay/2 + rand.N(b.delay/2+1)
	if elapsed := now.Sub(b.streakStart); elapsed+d > p.maxElapsed {
		return fmt.Errorf("%w (gave up after retrying for %s)", cause, elapsed.Round(time.Millisecond))
	}
	b.delay = min(b.delay*2, maxRetryBackoff)
	n := b.retries.Add(1)
	b.log.Warn("Layer blob transfer failed, retrying", "image", b.ref, "digest", b.info.Digest, "retry", n,
		"maxRetries", p.max, "delay", d.Round(time.Millisecond), "offset", b.off, "cause", cause.Error())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-b.ctx.Done():
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, b.ctx.Err())
	}
}

// permanentBlobError: the registry's final word (credentials refused, the
// blob or repository unknown, a certificate problem), which no retry
// changes.
func permanentBlobError(err error) bool {
	var unauth docker.ErrUnauthorizedForCredentials
	if errors.As(err, &unauth) || permanentTransportError(err) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"unauthorized", "denied", "not found", "unknown to registry", "manifest unknown", "name unknown"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (b *resumingBlob) Close() error {
	if b.rc == nil {
		return nil
	}
	err := b.rc.Close()
	b.rc = nil
	return err
}
