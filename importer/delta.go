package importer

import (
	"context"

	"github.com/diskimport/engine/internal/delta"
)

// DeltaPass reports one delta pass: the blocks compared and changed, the
// bytes sent, the content digests before and after, and whether the pass
// was final (the source unchanged while it ran).
type DeltaPass = delta.Pass

// ReceiveDelta runs the import of a delta pass received over the wire
// (the upload server's session feeds pass): Info claims and signs its
// target, TransferDelta applies the runs the session hands over,
// Verify checks the End record's digest, Commit writes the held ends, with
// o's events, progress and logger, and one Result. o names the source
// (for the log) and the target; its other options do not apply.
func ReceiveDelta(ctx context.Context, o Options, pass *delta.ReceivedPass) (*Result, error) {
	r, err := newRequest(o)
	if err != nil {
		return &Result{Target: o.Target}, err
	}
	r.DeltaReceived = pass
	res, err := importWithRestarts(ctx, r)
	return res, cancelled(ctx, err)
}
