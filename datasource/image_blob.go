package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/types"

	"github.com/diskimport/engine/internal/retry"
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
	ctx    context.Context
	src    types.ImageSource
	info   types.BlobInfo
	cache  types.BlobInfoCache
	relay  *egressRelay  // names a refused connection; nil without one
	streak *retry.Streak // failures since bytes last flowed; the count is the source's

	rc      io.ReadCloser // nil between a failure and the next reopen
	off     int64         // bytes delivered to the reader
	pending error         // the failure that closed rc, retried on the next Read
}

// openBlob opens info's blob, retrying transient failures of the request
// itself. Retries are counted in budget and logged to log.
func openBlob(ctx context.Context, src types.ImageSource, info types.BlobInfo, cache types.BlobInfoCache,
	relay *egressRelay, ref string, budget *retry.Budget, log *slog.Logger,
) (*resumingBlob, error) {
	b := &resumingBlob{ctx: ctx, src: src, info: info, cache: cache, relay: relay}
	b.streak = budget.Streak(func(a retry.Attempt) {
		log.Warn("Layer blob transfer failed, retrying", retry.Notice{Attempt: a, Offset: b.off,
			Failure: retryFailure(ref, a.Cause, 0), Context: []slog.Attr{slog.String("image", ref), slog.Any("digest", info.Digest)}}.Attr())
	})
	for {
		err := b.reopen()
		if err == nil {
			return b, nil
		}
		if werr := b.streak.Wait(ctx, err, 0); werr != nil {
			return nil, werr
		}
	}
}

// reopen fetches the blob from its start and discards what was already
// delivered.
func (b *resumingBlob) reopen() error {
	rc, _, err := b.src.GetBlob(b.ctx, b.info, b.cache)
	if err != nil {
		return fmt.Errorf("fetching layer %s: %w", b.info.Digest, b.relay.explain(err))
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
			if err := b.streak.Wait(b.ctx, b.pending, 0); err != nil {
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
			b.streak.Reset() // bytes flow again: a new streak later
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

// retryableBlobError classifies a failed blob request or transfer for the
// retry policy: everything but the registry's final word (credentials
// refused, the blob or repository unknown, a certificate problem), which
// no retry changes.
func retryableBlobError(err error) bool { return !permanentBlobError(err) }

func permanentBlobError(err error) bool {
	var unauth docker.ErrUnauthorizedForCredentials
	if errors.As(err, &unauth) || permanentTransportError(err) {
		return true
	}
	// containers/image reports the registry's error codes (UNAUTHORIZED,
	// DENIED, BLOB_UNKNOWN, ...) and unexpected statuses in types of its
	// own or of docker/distribution that it does not export consistently;
	// their text is the one stable signal.
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
