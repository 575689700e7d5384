package importer

import (
	"time"

	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/engine"
)

// DeltaPass reports one delta pass: the blocks compared and changed, the
// bytes sent, the content digests before and after, and whether the pass
// was final (the source unchanged while it ran).
type DeltaPass = delta.Pass

// NewDeltaResult is the Result of a delta pass received over the wire
// and completed onto target (the upload server's): what the pass reports,
// as the engine records a local pass (engine.Result.TakeDeltaPass).
func NewDeltaResult(target string, p *DeltaPass, took time.Duration) *Result {
	r := &engine.Result{Complete: true, Target: target, SourceFormat: string(format.Raw), BytesRead: p.Size, Duration: took}
	r.TakeDeltaPass(p)
	return (*Result)(r)
}
