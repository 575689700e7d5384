package datasource

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/units"
)

// RestartError says why a broken transfer cannot resume: the server ignored
// the Range request, or the object changed since the first response (its
// ETag or Last-Modified differs), or it offers no validator that would let
// us tell. Continuing would splice two different objects, so the only safe
// way on is a fresh Open. It matches errdefs.ErrRestart and
// errdefs.ErrSourceUnreachable (for callers that do not restart).
type RestartError struct {
	URL    string
	Offset int64 // bytes already delivered when the resume failed
	Reason string
	// Why is Reason in a few words for a person, without the failure's
	// chain of causes; "": Reason.
	Why string
}

// Told is the restart, the import's n-th, of source as its log record
// carries it (source, restart, cause) and as a person reads it in one
// sentence (retry.Told): "127.0.0.1:8080 cannot resume at 2.0 MiB: the
// server gave no ETag or Last-Modified to resume safely; starting over
// from the beginning (restart 1)".
func (e *RestartError) Told(n int, source string) slog.Attr {
	return slog.Any("", restartTold{err: e, n: n, source: source})
}

// restartTold is RestartError.Told's value.
type restartTold struct {
	err    *RestartError
	n      int
	source string
}

func (r restartTold) LogValue() slog.Value {
	return slog.GroupValue(slog.String("source", r.source), slog.Int("restart", r.n), slog.String("cause", r.err.Error()))
}

func (r restartTold) Sentence() string {
	where := r.err.URL
	if u, err := url.Parse(where); err == nil && u.Host != "" {
		where = u.Host
	}
	return fmt.Sprintf("%s cannot resume at %s: %s; starting over from the beginning (restart %d)",
		where, units.Bytes(r.err.Offset), cmp.Or(r.err.Why, r.err.Reason), r.n)
}

func (e *RestartError) Error() string {
	return fmt.Sprintf("GET %s: cannot resume at byte %d: %s; the transfer must start over", e.URL, e.Offset, e.Reason)
}

// Is makes errors.Is match errdefs.ErrRestart and errdefs.ErrSourceUnreachable.
func (e *RestartError) Is(target error) bool {
	return target == errdefs.ErrRestart || target == errdefs.ErrSourceUnreachable
}

// A RetryReporter is a [Source] that says how many times it re-sent a
// request after a failure (reconnects, resumes, retried statuses) over its
// life; the import's result reports it (importer.Result.Retries). The
// built-in network sources are; a custom source may be.
type RetryReporter interface {
	Retries() int
}

// retries is src's RetryReporter count, or 0 for a source that is none.
func retries(src Source) int {
	if r, ok := src.(RetryReporter); ok {
		return r.Retries()
	}
	return 0
}
