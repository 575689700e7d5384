package uploadserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
)

// passTarget is what a delta session writes: a volume's target
// (delta.Target) or a filesystem volume's (delta.TreeTarget).
type passTarget interface {
	Size() int64
	Offset() int64
	Data(off int64, p []byte) error
	Zero(off, n int64) error
	Finish(want blkhash.Digest) (blkhash.Digest, error)
	Pass() delta.Pass
	Close() error
}

// deltaSession is a sparse-v1 session's delta pass (internal/delta): the
// target, written in place, signed when the session opened. It waits for
// its runs, and across a dropped connection, as a suspended session does.
type deltaSession struct {
	t    passTarget
	path string
	// ask is the signature request that opened the session (its size and
	// base, the manifest's digest): one asked again must be the same.
	ask string
	// answer writes the signature answer again while no run was applied
	// (false after).
	answer func(w io.Writer) (bool, error)
	start  time.Time
}

// abort closes the target unfinished: once a run was applied its ends
// stay zeroed, so it is no copy anything takes for done.
func (d *deltaSession) abort() { d.t.Close() }

// serveDeltaSignature opens a delta session: the target is opened in
// place and signed, the signature is the answer, and the session waits for
// its runs. A target that is no base (none, another size, unreadable, not
// the base named) is answered 412 and no session is kept: the sender then
// clones in full. A request for a session already open, before any run,
// is its first answer cut off: the same answer again.
func (h *Handler) serveDeltaSignature(w http.ResponseWriter, r *http.Request, id, ct string) {
	size, err := strconv.ParseInt(r.Header.Get(cloner.SizeHeader), 10, 64)
	if err != nil || size < 0 {
		http.Error(w, "a delta signature request needs the source's size in "+cloner.SizeHeader, http.StatusBadRequest)
		return
	}
	var manifest *delta.Manifest
	ask := ct + " " + strconv.FormatInt(size, 10) + " " + r.Header.Get(cloner.BaseHeader)
	if ct == ContentTypeFilesystemClone {
		b, err := io.ReadAll(io.LimitReader(s2.NewReader(r.Body), maxManifestWire))
		if err == nil {
			manifest, err = delta.ReadManifest(bytes.NewReader(b))
		}
		if err == nil && manifest.LayOut().Size != size {
			err = fmt.Errorf("the manifest lays out %d bytes, the request says %d: %w", manifest.LayOut().Size, size, errdefs.ErrInvalidImage)
		}
		if err != nil {
			http.Error(w, statusText(err), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(b)
		ask += " " + hex.EncodeToString(sum[:])
	}
	sess, err := h.claimCloneSession(id)
	if err != nil {
		http.Error(w, err.Error(), beginStatus(err))
		return
	}
	if sess.started() {
		if d := sess.delta; d != nil && d.ask == ask {
			h.log.Info("Delta signature asked for again", "session", id)
			h.sendSignature(w, sess)
			return
		}
		h.suspendClone(sess, errors.New("a second signature request for the session"))
		http.Error(w, "clone session "+id+" is already open", http.StatusConflict)
		return
	}
	h.setPhase(string(importer.PhaseInfo))
	d := &deltaSession{ask: ask, start: time.Now()}
	if manifest != nil {
		d.path = archiveDir(h.opts.Import.Target)
		err = h.openTreeTarget(r.Context(), d, manifest, r.Header.Get(cloner.BaseHeader))
	} else {
		d.path = delta.TargetPath(h.opts.Import.Target)
		err = h.signDeltaTarget(r.Context(), d, size, r.Header.Get(cloner.BaseHeader))
	}
	if err != nil {
		h.releaseClaim()
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, errdefs.ErrNoDeltaBase):
			status = http.StatusPreconditionFailed
		case errors.Is(err, errdefs.ErrTargetBusy):
			status = http.StatusConflict
		case errors.Is(err, errdefs.ErrTargetTooSmall):
			status = http.StatusInsufficientStorage
		}
		h.log.Info("No delta pass", "session", id, "target", d.path, "err", err)
		http.Error(w, statusText(err), status)
		return
	}
	sess.delta = d
	h.sendSignature(w, sess)
}

// maxManifestWire bounds a filesystem volume's manifest as read.
const maxManifestWire = 64 << 20

// sendSignature answers a signature request with the session's answer
// and leaves the session waiting for its runs.
func (h *Handler) sendSignature(w http.ResponseWriter, sess *cloneSession) {
	w.Header().Set("Content-Type", "application/octet-stream")
	sw := s2.NewWriter(w)
	ok, err := sess.delta.answer(sw)
	if err == nil && !ok {
		err = errors.New("runs were applied since: no signature to send again")
	}
	if err == nil {
		err = sw.Close()
	}
	if err != nil {
		// The sender asks again or the session expires at the end of the
		// resume window.
		h.log.Warn("Sending the delta signature failed", "session", sess.id, "err", err)
	}
	h.suspendClone(sess, nil)
}

// signDeltaTarget opens and signs the target of d. A server that grows
// its file to a requested size holds no copy of the source's size: no
// base.
func (h *Handler) signDeltaTarget(ctx context.Context, d *deltaSession, size int64, base string) error {
	if h.opts.Import.Size > 0 && !isBlockDevice(d.path) {
		return fmt.Errorf("this server grows its file to a requested size: its target is no copy of the source: %w", errdefs.ErrNoDeltaBase)
	}
	t, err := delta.OpenTarget(d.path, size)
	if err != nil {
		return err
	}
	sig, err := t.Sign(ctx)
	if err == nil {
		err = delta.CheckBase(sig, base)
	}
	if err != nil {
		t.Close()
		return err
	}
	h.log.Info("Delta target signed", "target", d.path, "blocks", len(sig.Sums), "digest", sig.Digest)
	d.t = t
	d.answer = func(w io.Writer) (bool, error) {
		sig := t.Signed()
		if sig == nil {
			return false, nil
		}
		_, err := sig.WriteTo(w)
		return true, err
	}
	return nil
}

// openTreeTarget opens a filesystem volume's pass onto the directory of
// d: its large files signed in place, the others to be sent whole (all
// of them when the volume is not the base named). A block target takes
// no such pass (the sender then sends CDI's tar).
func (h *Handler) openTreeTarget(ctx context.Context, d *deltaSession, m *delta.Manifest, base string) error {
	if fi, err := os.Stat(d.path); err != nil || !fi.IsDir() {
		return fmt.Errorf("the target %s is not a filesystem volume's directory: %w", d.path, errdefs.ErrNoDeltaBase)
	}
	tt, err := delta.OpenTree(ctx, d.path, m, base)
	if err != nil {
		return err
	}
	isBase, digest := tt.Base()
	files, _ := tt.Signed()
	h.log.Info("Filesystem delta target signed", "target", d.path, "entries", len(m.Entries), "inPlace", len(files), "kept", len(tt.Kept()), "base", isBase, "digest", digest)
	d.t = tt
	d.answer = func(w io.Writer) (bool, error) {
		files, sigs := tt.Signed()
		if files == nil && tt.Offset() != 0 {
			return false, nil
		}
		return true, delta.WriteTreeAnswer(w, &delta.TreeAnswer{Base: isBase, BaseDigest: digest, Files: files, Kept: tt.Kept()}, sigs)
	}
	return nil
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
