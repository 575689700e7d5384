package cloner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/retry"
)

// sendDelta runs a delta pass over sparse-v2 (internal/delta): the
// target's signature is asked for while the source is signed, the runs
// that differ are sent in one session that resumes as sparse-v2's does,
// and the End record carries the source's content digest as sent, which
// the server's digest of its block hashes must equal before it answers.
// A target the server finds no base gets a full sparse-v2 clone. The
// source is a device or a file: a filesystem volume's raw disk image,
// onto a block device (DeltaOfDiskImage), passes as a device does.
func sendDelta(ctx context.Context, o Options) (*Result, error) {
	f, size, err := openDevice(o.Source)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The source is signed while the server signs its target; its
	// finality check (delta.Recheck: its stamp, or a second signing) starts
	// once that is done, while the server may still be signing and the
	// runs go out.
	type signed struct {
		s         *delta.Signature
		err       error
		unchanged func() (bool, error)
		stop      func()
	}
	mine := make(chan signed, 1)
	stamp := delta.StampSource(f)
	go func() {
		s, err := delta.Sign(ctx, f, size)
		r := signed{s: s, err: err, unchanged: func() (bool, error) { return false, err }, stop: func() {}}
		if err == nil {
			r.unchanged, r.stop = delta.Recheck(ctx, f, s, stamp)
		}
		mine <- r
	}()
	session := newSessionID()
	budget := retryBudget(o, retryableSignature)
	base, sigWire, sigRetries, err := fetchSignature(ctx, o, budget, func() (*delta.Signature, int64, error) {
		return requestSignature(ctx, o, session, size)
	})
	src := <-mine
	defer src.stop()
	if err == nil {
		err = delta.CheckBase(base, o.DeltaBase)
	}
	if errors.Is(err, errdefs.ErrNoDeltaBase) {
		src.stop()
		o.Logger.Info("The target is no delta base; cloning in full", "reason", err)
		res, err := sendSparse(ctx, o)
		if res != nil {
			res.WireBytes += sigWire
		}
		return res, err
	}
	if err != nil {
		return nil, err
	}
	if src.err != nil {
		return nil, src.err
	}
	runs := delta.Changes(src.s, base)
	pass := &delta.Pass{Stats: delta.Count(size, runs), BaseDigest: base.Digest.String(), SignatureBytes: sigWire}
	o.Logger.Info("Delta pass", "blocks", pass.Blocks, "changed", pass.BlocksChanged, "dataBytes", pass.DataBytes, "zeroBytes", pass.ZeroBytes, "signatureBytes", sigWire)
	res := &Result{Protocol: ProtocolSparseV2 + "+" + DeltaV1, SourceBytes: size, WireBytes: sigWire, Resumes: sigRetries, Delta: pass}
	moved := false
	err = resuming(ctx, o, budget, session, size, res, func(offset int64) ([]byte, int64, error) {
		send := func(from int64, sink delta.Sink) error {
			m, err := delta.Send(ctx, f, src.s, runs, from, sink)
			moved = moved || m
			return err
		}
		return runsRequest(ctx, o, size, offset, session, send, func() blkhash.Digest { return src.s.Digest })
	})
	pass.WireBytes, pass.Resumes = res.WireBytes, res.Resumes
	if err != nil {
		return res, err
	}
	pass.Digest = src.s.Digest.String()
	res.Digest = pass.Digest
	same, err := src.unchanged()
	if err != nil {
		return res, err
	}
	pass.Final = same && !moved
	return res, nil
}

// fetchSignature asks for the target's signature until an answer comes
// whole (request sends one request): a request whose connection dropped,
// before or while the signature came, is sent again in the same session
// after the budget's backoff, and the server sends the same signature
// again from the start (it keeps it until a run is applied). It returns
// the answer, the bytes of every answer and the retries.
func fetchSignature[T any](ctx context.Context, o Options, budget *retry.Budget, request func() (T, int64, error)) (T, int64, int, error) {
	streak := budget.Streak(func(a retry.Attempt) {
		o.Logger.Warn("Fetching the delta signature failed; asking again", "err", a.Cause, "attempt", a.N, "of", a.Max, "delay", a.Delay)
	})
	var wire int64
	for retries := 0; ; retries++ {
		sig, n, err := request()
		wire += n
		if err == nil {
			return sig, wire, retries, nil
		}
		if err := streak.Wait(ctx, err, 0); err != nil {
			return sig, wire, retries, err
		}
	}
}

// retryableSignature: the signature request got no whole answer (the
// connection dropped), or the server was still busy with the dropped
// request (409) when the next came; a target held by another pass is
// not waited for.
func retryableSignature(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code == http.StatusConflict && !strings.Contains(se.text, errdefs.ErrTargetBusy.Error())
	}
	return isTransportError(err)
}

// requestSignature asks the server for its target's signature, opening
// the session; a target that is no base comes back as
// errdefs.ErrNoDeltaBase.
func requestSignature(ctx context.Context, o Options, session string, size int64) (*delta.Signature, int64, error) {
	var sig *delta.Signature
	var of map[string]string
	if o.ContentType == ContentTypeFilesystem {
		// A filesystem volume's block pass is its disk image's.
		of = map[string]string{DeltaOfHeader: DeltaOfDiskImage}
	}
	n, err := askSignature(ctx, o, session, size, http.NoBody, of, func(r io.Reader) (err error) {
		sig, err = delta.ReadSignature(r, size)
		return err
	})
	return sig, n, err
}

// askSignature sends a signature request with body (and the headers
// extra) and hands the decompressed answer to read; it returns the
// answer's bytes on the wire. An answer that breaks off is a transport
// error (asked again).
func askSignature(ctx context.Context, o Options, session string, size int64, body io.Reader, extra map[string]string, read func(io.Reader) error) (int64, error) {
	headers := map[string]string{ProtocolHeader: ProtocolSparseV2, SessionHeader: session, DeltaHeader: DeltaSignature, SizeHeader: strconv.FormatInt(size, 10)}
	maps.Copy(headers, extra)
	if o.DeltaBase != "" {
		headers[BaseHeader] = o.DeltaBase
	}
	resp, err := postResponse(ctx, o, body, headers)
	var se *statusError
	if errors.As(err, &se) && se.code == http.StatusPreconditionFailed {
		return 0, fmt.Errorf("%s: %w", se.text, errdefs.ErrNoDeltaBase)
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	counted := iostage.NewCounter(resp.Body)
	if err := read(s2.NewReader(counted)); err != nil {
		if !errors.Is(err, errdefs.ErrInvalidImage) && !errors.Is(err, errdefs.ErrNoDeltaBase) {
			// The answer broke off: the transport's failure, not the
			// signature's content.
			err = &transportError{err}
		}
		return counted.Count(), err
	}
	// The rest of the answer (the compressed stream's end), so the server
	// sees it taken whole.
	_, _ = io.Copy(io.Discard, io.LimitReader(counted, 64<<10))
	return counted.Count(), nil
}

// runsRequest sends, in one POST of the session, the runs that end after
// offset (send gives them to the sink) and the End record with digest's
// value once they were sent.
func runsRequest(ctx context.Context, o Options, size, offset int64, session string, send func(from int64, sink delta.Sink) error, digest func() blkhash.Digest) ([]byte, int64, error) {
	headers := framed(o.framing, map[string]string{ProtocolHeader: ProtocolSparseV2, SessionHeader: session, DeltaHeader: DeltaApply})
	return postStream(ctx, o, headers, func(w io.Writer) error {
		enc, end := bodyEncoder(w, o.framing)
		err := enc.Start(size, offset)
		if err == nil {
			err = send(offset, &progressSink{enc, o})
		}
		if err == nil {
			err = enc.End(digest())
		}
		if err == nil {
			err = end()
		}
		return err
	})
}

// progressSink encodes a pass's runs as records and reports the offset
// reached.
type progressSink struct {
	enc *Encoder
	o   Options
}

func (p *progressSink) Data(off int64, b []byte) error {
	p.o.Progress.Store(off + int64(len(b)))
	return p.enc.Data(off, b)
}

func (p *progressSink) Zero(off, n int64) error {
	p.o.Progress.Store(off + n)
	return p.enc.Zero(off, n)
}
