package uploadserver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
)

// deltaSession is a sparse-v2 session's delta pass: an import on the
// delta route (importer.ReceiveDelta) whose runs the session's requests
// hand over (runs, as a full clone's are). The import claims and signs
// the target, applies the runs, checks the End record's digest and
// commits; the session keeps the wire: the signature answer, records,
// offsets, resumption across dropped connections, the 412 of a target
// that is no base.
type deltaSession struct {
	runs *runHandoff
	sig  *importer.DeltaSignature
	size int64
	// offset is where a resumed session goes on: every run before it
	// was applied.
	offset atomic.Int64
	// ask is the signature request that opened the session (its size and
	// base, the manifest's digest): one asked again must be the same.
	ask string
	// stop cancels the import's context (an abort also stops the signing
	// of a large target).
	stop context.CancelFunc
	done chan struct{} // closed once the import returned
	res  *importer.Result
	err  error
}

// abort ends the pass unfinished and waits for its import: once a run
// was applied the target's ends stay zeroed, so it is no copy anything
// takes for done.
func (d *deltaSession) abort(cause error) {
	if cause == nil {
		cause = errSessionEnded
	}
	d.runs.close(cause)
	d.stop()
	<-d.done
}

// ended is the import's outcome once it returned: its own error, or
// err when it has none.
func (d *deltaSession) ended(err error) error {
	<-d.done
	return cmp.Or(d.err, err)
}

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
	var manifest []byte
	diskImage := ct == ContentTypeFilesystemClone && r.Header.Get(cloner.DeltaOfHeader) == cloner.DeltaOfDiskImage
	ask := ct + " " + strconv.FormatInt(size, 10) + " " + r.Header.Get(cloner.BaseHeader) + " " + r.Header.Get(cloner.DeltaOfHeader)
	if ct == ContentTypeFilesystemClone && !diskImage {
		b, err := io.ReadAll(io.LimitReader(s2.NewReader(r.Body), maxManifestWire))
		var m *delta.Manifest
		if err == nil {
			m, err = delta.ReadManifest(bytes.NewReader(b))
		}
		var layout delta.Layout
		if err == nil {
			layout, err = m.LayOut()
		}
		if err == nil && layout.Size != size {
			err = fmt.Errorf("the manifest lays out %d bytes, the request says %d: %w", layout.Size, size, errdefs.ErrInvalidImage)
		}
		if err != nil {
			http.Error(w, statusText(err), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(b)
		ask += " " + hex.EncodeToString(sum[:])
		manifest = b
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
	d, err := h.startDelta(r.Context(), manifest, diskImage, size, r.Header.Get(cloner.BaseHeader))
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
		h.log.Info("No delta pass", "session", id, "target", h.opts.Import.Target, "err", err)
		http.Error(w, statusText(err), status)
		return
	}
	d.ask = ask
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
	ok, err := sess.delta.sig.Send(sw)
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

// startDelta starts the import of a delta pass (importer.ReceiveDelta)
// onto the server's target, a filesystem volume's directory when manifest
// is set, else the volume; it returns once the import claimed and signed the
// target, or with the import's error (ErrNoDeltaBase: no base). The import
// runs under the server's context, not the request's: the session
// outlives its requests. A server that grows its file to a requested size
// holds no copy of the source's size: no base; a block target takes no
// filesystem volume's pass (the sender then sends the volume whole) but
// the pass of a volume's disk image (diskImage: the block pass, onto the
// device, where its records would go in full), which only a block target
// takes (a filesystem volume's directory takes the volume's pass).
func (h *Handler) startDelta(ctx context.Context, manifest []byte, diskImage bool, size int64, base string) (*deltaSession, error) {
	var target string
	if diskImage && !isBlockDevice(h.opts.Import.Target) {
		return nil, fmt.Errorf("the target %s is no block device: a filesystem volume's disk image takes the volume's pass here: %w", h.opts.Import.Target, errdefs.ErrNoDeltaBase)
	}
	if manifest != nil {
		// A filesystem volume's pass lays out a directory, removing what
		// its manifest does not list: never the directory a block target
		// lies in (/dev).
		if isBlockDevice(h.opts.Import.Target) {
			return nil, fmt.Errorf("the target %s is a block device, not a filesystem volume's directory: %w", h.opts.Import.Target, errdefs.ErrNoDeltaBase)
		}
		target = archiveDir(h.opts.Import.Target)
		if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("the target %s is not a filesystem volume's directory: %w", target, errdefs.ErrNoDeltaBase)
		}
	} else {
		target = delta.TargetPath(h.opts.Import.Target)
		if h.opts.Import.Size > 0 && !isBlockDevice(target) {
			return nil, fmt.Errorf("this server grows its file to a requested size: its target is no copy of the source: %w", errdefs.ErrNoDeltaBase)
		}
	}
	o := h.importOptions(http.NoBody)
	o.SourceReaderName, o.Target = "the delta session", target
	o = h.withEvents(o, func() {})
	ictx, stop := context.WithCancel(h.opts.BaseContext)
	d := &deltaSession{size: size, stop: stop, done: make(chan struct{})}
	d.runs = newRunHandoff(d.done)
	signed := make(chan *importer.DeltaSignature, 1)
	pass := importer.ReceivedDelta{
		Size: size, Base: base, Manifest: manifest, Runs: d.runs,
		Signed: func(sig *importer.DeltaSignature) { signed <- sig },
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer close(d.done)
		defer stop()
		d.res, d.err = importer.ReceiveDelta(ictx, o, pass)
	}()
	select {
	case d.sig = <-signed:
		return d, nil
	case <-d.done:
		return nil, cmp.Or(d.err, errImportEnded)
	case <-ctx.Done():
		// The sender left while the target was signed: it asks again.
		err := fmt.Errorf("signing the delta target: %w: %w", errdefs.ErrCancelled, ctx.Err())
		d.abort(err)
		return nil, err
	}
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

// receiveDelta hands one request's runs to the delta session's import,
// from the offset it holds; the End record's digest is the import's to
// check (Verify) before it commits the target.
func (h *Handler) receiveDelta(ctx context.Context, sess *cloneSession, dec *cloner.Decoder) (*importer.Result, error) {
	d := sess.delta
	rec, err := dec.Next()
	if err != nil {
		return nil, fmt.Errorf("receiving the delta pass: %w", err)
	}
	if !rec.IsStart() || rec.Size != d.size || rec.Offset != d.offset.Load() {
		return nil, fmt.Errorf("delta pass request starts at %d of %d bytes, the server holds %d of %d: %w", rec.Offset, rec.Size, d.offset.Load(), d.size, errdefs.ErrInvalidImage)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("receiving the delta pass: %w", err)
		}
		rec, err := dec.Next()
		if err != nil {
			return nil, fmt.Errorf("receiving the delta pass at %d bytes: %w", d.offset.Load(), err)
		}
		switch {
		case rec.IsEnd():
			if err := d.runs.end(ctx, blkhash.Digest(rec.Digest).String()); err != nil {
				return nil, d.failed(ctx, err)
			}
			if err := d.ended(nil); err != nil {
				return nil, asTargetError(err)
			}
			d.res.Delta.WireBytes = h.counter().Load()
			return d.res, nil
		case rec.IsData():
			err = d.apply(ctx, run{off: rec.Offset, data: rec.Data}, int64(len(rec.Data)))
		case rec.IsZero():
			err = d.apply(ctx, run{off: rec.Offset, zeros: rec.Length}, rec.Length)
		default:
			err = fmt.Errorf("unexpected clone record %q: %w", rec.Kind, errdefs.ErrInvalidImage)
		}
		if err != nil {
			return nil, d.failed(ctx, err)
		}
	}
}

// apply hands the import one run of n bytes and, once it was applied,
// moves the session's offset past it.
func (d *deltaSession) apply(ctx context.Context, r run, n int64) error {
	if err := d.runs.hand(ctx, r); err != nil {
		return err
	}
	d.offset.Store(r.off + n)
	return nil
}

// failed is err of a run the session handed over: the request's end, for
// the session to resume, or the import's own error (the target refused
// the run, or the import ended), once it returned.
func (d *deltaSession) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("receiving the delta pass: %w", err)
	}
	if errors.Is(err, errdefs.ErrInvalidImage) {
		return err
	}
	return asTargetError(d.ended(err))
}

// asTargetError marks a failure to write the target (not the stream's
// content, nor a digest that differs) as one.
func asTargetError(err error) error {
	if errors.Is(err, errdefs.ErrInvalidImage) || errors.Is(err, errdefs.ErrVerifyMismatch) {
		return err
	}
	return &targetError{err}
}
