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
// Open and nothing of the old bytes.
func importWithRestarts(ctx context.Context, r Request) (*Result, error) {
	start := time.Now()
	for restarts := 0; ; restarts++ {
		res, err := importOnce(ctx, r, start)
		res.Retries = datasource.Retries(r.Source)
		var re *datasource.RestartError
		if err == nil || ctx.Err() != nil || !errors.As(err, &re) || restarts >= maxRestarts {
			return res, err
		}
		log := r.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("Transfer cannot resume; starting the import over from the beginning",
			"source", r.Source.String(), "restart", restarts+1, "cause", re.Error())
	}
}
