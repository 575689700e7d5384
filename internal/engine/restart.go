package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/diskimport/engine/datasource"
)

// maxRestarts is a backstop only: every restart also spends one of the
// source's retries, which is the real bound.
const maxRestarts = 100

// importWithRestarts runs import attempts until one ends without asking to
// start over. A source that cannot resume a broken transfer (the server
// ignores Range, or the object changed) fails the attempt with a
// *datasource.RestartError; that attempt has already aborted its target and
// removed its scratch file, so the next one begins from Info with a fresh
// Open and nothing of the old bytes. An attempt on RouteStreamDecode whose
// image the decoder cannot stream (notStreamableError) is started over the
// same way, once, with Request.NoStreamDecode set: the request is all the
// attempts share, and that flag sends the next one to RouteRanged (a
// server that serves ranges) or RouteScratch. Only a
// source that can be read again fails so (streamdecode.go): clusters ahead
// of their tables spill to the scratch directory instead, so this is left
// for layouts the decoder cannot follow at all, or an overflow with no
// usable scratch directory (where the scratch route then reports
// ErrScratchSpaceRequired, as it always did).
func importWithRestarts(ctx context.Context, r Request) (*Result, error) {
	start := time.Now()
	for restarts := 0; ; restarts++ {
		res, err := importOnce(ctx, r, start)
		res.Retries = datasource.Retries(r.Source)
		var ns *notStreamableError
		if err != nil && ctx.Err() == nil && !r.NoStreamDecode && errors.As(err, &ns) {
			// The decoder met a layout it cannot stream (streamdecode.go):
			// that attempt wrote no head and removed its file; the next
			// one reads the source again, over ranges or through scratch.
			r.NoStreamDecode = true
			logger(r).Warn("The image cannot be decoded in one pass; starting the import over through qemu-img",
				"source", r.Source.String(), "cause", ns.Error())
			continue
		}
		var re *datasource.RestartError
		if err == nil || ctx.Err() != nil || !errors.As(err, &re) || restarts >= maxRestarts {
			return res, err
		}
		logger(r).Warn("Transfer cannot resume; starting the import over from the beginning",
			"source", r.Source.String(), "restart", restarts+1, "cause", re.Error())
	}
}

func logger(r Request) *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}
