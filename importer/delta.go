package importer

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/delta"
)

// DeltaPass reports one delta pass (Result.Delta): the blocks compared
// and changed, the bytes sent, the content digests before and after, and
// whether the pass was final (the source unchanged while it ran). Its JSON
// is the command line's "delta" object.
type DeltaPass struct {
	// Size is the volume's size in bytes.
	Size int64 `json:"size"`
	// Blocks is the volume's count of 64 KiB blocks, BlocksChanged those
	// that differed and were written.
	Blocks        int64 `json:"blocks"`
	BlocksChanged int64 `json:"blocksChanged"`
	// DataBytes were read and written as data; ZeroBytes as zero runs.
	DataBytes int64 `json:"dataBytes"`
	ZeroBytes int64 `json:"zeroBytes"`
	// BaseDigest is the target's content digest before the pass; Digest
	// the source's, which the target has after it.
	BaseDigest string `json:"baseDigest"`
	Digest     string `json:"digest"`
	// Final: the source was signed again after the pass and had not
	// changed, so the target is a consistent copy of a quiesced source.
	// A pass of a source in use is a warm pass, to be followed by another.
	Final bool `json:"final"`
	// Full: the target was no base (a filesystem volume whose digest is
	// not the base named): every file was sent whole.
	Full bool `json:"full,omitempty"`
	// Received marks a pass received over the wire (ReceiveDelta):
	// whether it was final only the sender can tell (Final is false).
	Received bool `json:"received,omitempty"`
	// WireBytes counts what crossed the wire (0 for a local pass),
	// SignatureBytes the signature's part of it.
	WireBytes      int64 `json:"wireBytes"`
	SignatureBytes int64 `json:"signatureBytes,omitempty"`
	// Resumes counts requests that resumed a dropped one.
	Resumes  int           `json:"resumes,omitempty"`
	Duration time.Duration `json:"-"`
}

// deltaPassOf is the report of the machinery's pass p.
func deltaPassOf(p *delta.Pass) *DeltaPass {
	return &DeltaPass{
		Size: p.Size, Blocks: p.Blocks, BlocksChanged: p.BlocksChanged, DataBytes: p.DataBytes, ZeroBytes: p.ZeroBytes,
		BaseDigest: p.BaseDigest, Digest: p.Digest, Final: p.Final, Full: p.Full, Received: p.Received,
		WireBytes: p.WireBytes, SignatureBytes: p.SignatureBytes, Resumes: p.Resumes, Duration: p.Duration,
	}
}

// ReceivedDelta is a delta pass whose runs arrive over the wire
// (`importer clone-source -delta`'s records, or a program's own sender),
// for ReceiveDelta.
type ReceivedDelta struct {
	// Size is the source volume's size in bytes; the target must be of
	// that size, or a block device larger than it (unless
	// Options.ExactSize): the pass is then of its first Size bytes, and
	// the rest reads as after a full clone (as it lies, but for an old
	// image's GPT backup header in the last sector: its last MiB
	// zeroed). Base, when set, is the content digest the target must
	// have to be the pass's base (the last pass's Result.ContentDigest).
	Size int64
	Base string
	// Manifest, for a filesystem volume's pass, is the sender's manifest
	// of the volume's files as it sent it (clone-source -delta of a
	// directory); the target is then the directory Options.Target names.
	// Nil for a volume (a file or a block device).
	Manifest []byte
	// Runs are the pass's runs, in order, each at its offset: the blocks
	// the target already holds are not sent (gaps between runs), data
	// runs and zero runs the others. After the last, NextRun returns
	// io.EOF and Digest is the source's content digest, which the target
	// must have before it is committed (else ErrVerifyMismatch). Another
	// error from NextRun (the sender gone for good) fails the pass. A run
	// has been applied to the target when the next is asked for.
	Runs datasource.Runs
	// Signed, when set, is called once the target is claimed and signed,
	// before the first run is asked for, with the answer the sender waits
	// for to choose the runs.
	Signed func(*DeltaSignature)
}

// DeltaSignature is a delta target's answer to its sender: the block
// hashes of the volume (of a filesystem volume, also which files it holds
// and whether it is the base named), in the wire form clone-source reads.
type DeltaSignature struct {
	answer func(io.Writer) (bool, error)
}

// Send writes the answer to w while no run was applied, and returns false
// once one was (the target no longer holds its signature: the pass goes
// on from its offset instead).
func (s *DeltaSignature) Send(w io.Writer) (bool, error) { return s.answer(w) }

// ReceiveDelta runs the import of a delta pass received over the wire:
// Info claims the target (Options.Target) in place and signs it, and
// hands the signature to pass.Signed; TransferDelta applies pass.Runs;
// Verify checks the target's content digest against pass.Runs.Digest;
// Commit writes the held ends; with o's events, progress and logger, and
// one Result. A target that is no base (another size, a device smaller
// than the source, not pass.Base) fails Info with errdefs.ErrNoDeltaBase:
// the sender then clones in full.
// o names the target, and the source for the log (empty: "a delta pass
// received"); its other options do not apply.
func ReceiveDelta(ctx context.Context, o Options, pass ReceivedDelta) (*Result, error) {
	failed := &Result{Target: o.Target, TargetState: TargetUntouched}
	if o.Source == "" && o.CustomSource == nil {
		// The runs are the source: nothing else is read.
		o.Source, o.SourceReader, o.SourceReaderName = "-", http.NoBody, "a delta pass received"
	}
	r, err := newRequest(o)
	if err != nil {
		return failed, err
	}
	if pass.Manifest != nil {
		m, err := delta.ReadManifest(bytes.NewReader(pass.Manifest))
		if err != nil {
			return failed, err
		}
		if r.DeltaReceived, err = delta.ReceiveTree(o.Target, m, pass.Base, pass.Runs); err != nil {
			return failed, err
		}
	} else {
		r.DeltaReceived = delta.ReceiveVolume(delta.TargetPath(o.Target), pass.Size, deltaFit(o.ExactSize), pass.Base, pass.Runs)
	}
	r.deltaSigned = pass.Signed
	res, err := importWithRestarts(ctx, r)
	return res, cancelled(ctx, err)
}

// deltaFit is the size rule of a pass's target, local or received: a
// block device larger than the source takes the pass over its first
// bytes, as it takes a full clone, unless the exact size was asked for.
func deltaFit(exactSize bool) delta.Fit {
	if exactSize {
		return delta.SameSize
	}
	return delta.DevicePrefix
}
