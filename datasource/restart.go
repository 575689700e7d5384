package datasource

import (
	"fmt"

	"github.com/diskimport/engine/errdefs"
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
