package uploadserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
)

// deltaSession is a sparse-v1 session's delta pass (internal/delta): the
// target, written in place, signed when the session opened. It waits for
// its runs, and across a dropped connection, as a suspended session does.
type deltaSession struct {
	t     *delta.Target
	path  string
	base  string // the base digest the signature request named
	start time.Time
}

// abort closes the target unfinished: once a run was applied its ends
// stay zeroed, so it is no copy anything takes for done.
func (d *deltaSession) abort() { d.t.Close() }

// serveDeltaSignature opens a delta session: the target is opened in
// place and signed, the signature is the answer, and the session waits for
// its runs. A target that is no base (none, another size, unreadable, not
// the base named) is answered 412 and no session is kept: the sender then
// clones in full.
func (h *Handler) serveDeltaSignature(w http.ResponseWriter, r *http.Request, id string) {
	size, err := strconv.ParseInt(r.Header.Get(cloner.SizeHeader), 10, 64)
	if err != nil || size < 0 {
		http.Error(w, "a delta signature request needs the source's size in "+cloner.SizeHeader, http.StatusBadRequest)
		return
	}
	sess, err := h.claimCloneSession(id)
	if err != nil {
		http.Error(w, err.Error(), beginStatus(err))
		return
	}
	if sess.started() {
		// The answer to the first request was cut off: the same
		// signature again, while no run was applied.
		sig := sess.signedAgain(size, r.Header.Get(cloner.BaseHeader))
		if sig == nil {
			h.suspendClone(sess, errors.New("a second signature request for the session"))
			http.Error(w, "clone session "+id+" is already open", http.StatusConflict)
			return
		}
		h.log.Info("Delta signature asked for again", "session", id, "blocks", len(sig.Sums))
		h.sendSignature(w, sess, sig)
		return
	}
	h.setPhase(string(importer.PhaseInfo))
	d := &deltaSession{path: delta.TargetPath(h.opts.Import.Target), start: time.Now()}
	sig, err := h.signDeltaTarget(r.Context(), d, size, r.Header.Get(cloner.BaseHeader))
	if err != nil {
		h.releaseClaim()
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, errdefs.ErrNoDeltaBase):
			status = http.StatusPreconditionFailed
		case errors.Is(err, errdefs.ErrTargetBusy):
			status = http.StatusConflict
		}
		h.log.Info("No delta pass", "session", id, "target", d.path, "err", err)
		http.Error(w, statusText(err), status)
		return
	}
	sess.delta = d
	d.base = r.Header.Get(cloner.BaseHeader)
	h.log.Info("Delta target signed", "session", id, "target", d.path, "blocks", len(sig.Sums), "digest", sig.Digest)
	h.sendSignature(w, sess, sig)
}

// sendSignature answers a signature request with sig and leaves the
// session waiting for its runs.
func (h *Handler) sendSignature(w http.ResponseWriter, sess *cloneSession, sig *delta.Signature) {
	w.Header().Set("Content-Type", "application/octet-stream")
	sw := s2.NewWriter(w)
	_, err := sig.WriteTo(sw)
	if err == nil {
		err = sw.Close()
	}
	if err != nil {
		// The sender asks again (signedAgain) or the session expires at
		// the end of the resume window.
		h.log.Warn("Sending the delta signature failed", "session", sess.id, "err", err)
	}
	h.suspendClone(sess, nil)
}

// signedAgain is the session's signature for a second request of the
// same pass (same size, same base named) before any run was applied; nil
// otherwise.
func (s *cloneSession) signedAgain(size int64, base string) *delta.Signature {
	d := s.delta
	if d == nil || d.t.Size() != size || d.base != base {
		return nil
	}
	return d.t.Signed()
}

// signDeltaTarget opens and signs the target of d. A server that grows
// its file to a requested size holds no copy of the source's size: no
// base.
func (h *Handler) signDeltaTarget(ctx context.Context, d *deltaSession, size int64, base string) (*delta.Signature, error) {
	if h.opts.Import.Size > 0 && !isBlockDevice(d.path) {
		return nil, fmt.Errorf("this server grows its file to a requested size: its target is no copy of the source: %w", errdefs.ErrNoDeltaBase)
	}
	t, err := delta.OpenTarget(d.path, size)
	if err != nil {
		return nil, err
	}
	sig, err := t.Sign(ctx)
	if err == nil {
		err = delta.CheckBase(sig, base)
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	d.t = t
	return sig, nil
}

// refuseLostDelta refuses the runs of a delta session this server does not
// hold (it expired, or the server restarted): taken as a new session they
// would start a full import of a stream that is not one.
func refuseLostDelta(r *http.Request, sess *cloneSession) error {
	if r.Header.Get(cloner.DeltaHeader) != cloner.DeltaApply || sess.delta != nil {
		return nil
	}
	return fmt.Errorf("delta session %s is not held here (expired, or the server restarted): start the pass again with its signature", sess.id)
}

// releaseClaim frees the server claimed for a request that started
// nothing.
func (h *Handler) releaseClaim() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.busy = false
	h.status = Status{Phase: "Idle"}
}

// receiveDelta applies one request's runs to the delta session, from the
// offset it holds; the End record's digest must be the target's after the
// runs before the pass completes.
func (h *Handler) receiveDelta(ctx context.Context, sess *cloneSession, dec *cloner.Decoder) (*importer.Result, error) {
	d := sess.delta
	rec, err := dec.Next()
	if err != nil {
		return nil, fmt.Errorf("receiving the delta pass: %w", err)
	}
	if !rec.IsStart() || rec.Size != d.t.Size() || rec.Offset != d.t.Offset() {
		return nil, fmt.Errorf("delta pass request starts at %d of %d bytes, the server holds %d of %d: %w", rec.Offset, rec.Size, d.t.Offset(), d.t.Size(), errdefs.ErrInvalidImage)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("receiving the delta pass: %w", err)
		}
		rec, err := dec.Next()
		if err != nil {
			return nil, fmt.Errorf("receiving the delta pass at %d bytes: %w", d.t.Offset(), err)
		}
		switch {
		case rec.IsEnd():
			if _, err := d.t.Finish(blkhash.Digest(rec.Digest)); err != nil {
				return nil, asTargetError(err)
			}
			p := d.t.Pass()
			p.WireBytes, p.Received = h.counter().Load(), true
			d.t.Close()
			return importer.NewDeltaResult(d.path, &p, time.Since(d.start)), nil
		case rec.IsData():
			err = d.t.Data(rec.Offset, rec.Data)
		case rec.IsZero():
			err = d.t.Zero(rec.Offset, rec.Length)
		default:
			err = fmt.Errorf("unexpected clone record %q: %w", rec.Kind, errdefs.ErrInvalidImage)
		}
		if err != nil {
			return nil, asTargetError(err)
		}
	}
}

// asTargetError marks a failure to write the target (not the stream's
// content, nor a digest that differs) as one.
func asTargetError(err error) error {
	if errors.Is(err, errdefs.ErrInvalidImage) || errors.Is(err, errdefs.ErrVerifyMismatch) {
		return err
	}
	return &targetError{err}
}
