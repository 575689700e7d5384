package cloner

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
)

// DeltaTree, after DeltaV1 in a Result's Protocol, marks a filesystem
// volume's delta pass.
const DeltaTree = "tree"

// sendTreeDelta runs a filesystem volume's delta pass (delta.TreeSource,
// delta.TreeTarget): the volume's manifest goes with the signature
// request, the server answers with the signatures of the files it
// compares in place (large files of the same size: a KubeVirt volume's
// disk.img), every other file is sent whole, and the runs go in one
// session that resumes as sparse-v2's does, ending with the volume's
// digest, which the server's must equal before it puts anything in place.
// A server that takes no filesystem pass (412: its target is a block
// device, or holds no copy) gets the volume whole, as a clone without a
// delta pass would send it (the disk image's records where the volume
// holds only that and the server takes them, else CDI's tar stream).
func sendTreeDelta(ctx context.Context, o Options) (*Result, error) {
	src, err := delta.OpenTreeSource(ctx, o.Source)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// The small files' digests go in the manifest: those the server holds
	// are not sent.
	if err := src.SignSmall(ctx); err != nil {
		return nil, err
	}
	// The source is signed while the server answers; a server that takes
	// no pass stops the signing at once.
	signCtx, stopSigning := context.WithCancel(ctx)
	defer stopSigning()
	signed := make(chan error, 1)
	go func() { signed <- src.Sign(signCtx) }()
	var manifest bytes.Buffer
	sw := s2.NewWriter(&manifest)
	if _, err := src.Manifest().WriteTo(sw); err != nil {
		return nil, err
	}
	if err := sw.Close(); err != nil {
		return nil, err
	}
	session := newSessionID()
	budget := retryBudget(o, retryableSignature)
	type answer struct {
		a    *delta.TreeAnswer
		sigs map[int]*delta.Signature
	}
	got, sigWire, retries, err := fetchSignature(ctx, o, budget, func() (answer, int64, error) {
		var ans answer
		n, err := askSignature(ctx, o, session, src.Size(), bytes.NewReader(manifest.Bytes()), nil, func(r io.Reader) (err error) {
			ans.a, ans.sigs, err = delta.ReadTreeAnswer(r, src.Manifest())
			return err
		})
		return ans, n, err
	})
	if err != nil {
		stopSigning()
		<-signed
		if !errors.Is(err, errdefs.ErrNoDeltaBase) {
			return nil, err
		}
		o.Logger.Info("The server takes no filesystem delta pass; sending the volume whole", "reason", err)
		o.Delta = false
		res, err := sendFull(ctx, o, o.Protocol)
		if res != nil {
			res.WireBytes += sigWire
		}
		return res, err
	}
	if err := <-signed; err != nil {
		return nil, err
	}
	pass := &delta.Pass{Stats: src.Plan(got.sigs, got.a.Kept), BaseDigest: got.a.BaseDigest, SignatureBytes: sigWire, Full: !got.a.Base}
	o.Logger.Info("Filesystem delta pass", "entries", len(src.Manifest().Entries), "inPlace", len(got.sigs), "kept", len(got.a.Kept), "blocks", pass.Blocks,
		"changed", pass.BlocksChanged, "dataBytes", pass.DataBytes, "zeroBytes", pass.ZeroBytes, "signatureBytes", sigWire, "base", got.a.Base)
	res := &Result{Protocol: ProtocolSparseV2 + "+" + DeltaV1 + "+" + DeltaTree, SourceBytes: src.Size(), WireBytes: sigWire, Resumes: retries, Delta: pass}
	err = resuming(ctx, o, budget, session, src.Size(), res, func(offset int64) ([]byte, int64, error) {
		send := func(from int64, sink delta.Sink) error { return src.Send(ctx, from, sink) }
		return runsRequest(ctx, o, src.Size(), offset, session, send, src.Digest)
	})
	pass.WireBytes, pass.Resumes = res.WireBytes, res.Resumes
	if err != nil {
		return res, err
	}
	pass.Digest = delta.FormatTreeDigest(src.Digest())
	res.Digest = pass.Digest
	if pass.Final, err = src.Final(ctx); err != nil {
		return res, err
	}
	return res, nil
}
