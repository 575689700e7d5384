package uploadserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/errtable"
)

// maxOtherPart bounds a multipart part other than "file" (such parts are
// read and thrown away).
const maxOtherPart = 1 << 20

func (h *Handler) uploadHandler(kind uploadKind) http.Handler {
	form, async := kind.form, kind.async
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get(HeaderContentType); isCloneContentType(ct) {
			if form || async || kind.archive {
				// As CDI: a clone is one synchronous raw stream.
				http.Error(w, "a clone ("+ct+") is only accepted at "+PathUpload, http.StatusBadRequest)
				return
			}
			h.serveClone(w, r, ct)
			return
		}
		count, err := h.begin()
		if err != nil {
			code := http.StatusConflict
			if errors.Is(err, errFinished) || errors.Is(err, errDeadline) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
		stall := newStallGuard(w, h.opts.Import.StallTimeout)
		defer stall.disarm()
		stall.arm() // the multipart preamble counts too
		var src io.Reader = r.Body
		if form {
			part, err := filePart(r)
			if err != nil {
				err = stall.explain(err)
				h.release(err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			src = part
		}
		body := &gatedReader{r: src, n: count, stall: stall}
		h.log.Info("Upload started", "path", r.URL.Path, "remote", r.RemoteAddr, "contentLength", r.ContentLength)
		o := h.importOptions(body)
		if kind.archive {
			o.ContentType = importer.ContentTypeArchive
			o.Target = archiveDir(o.Target)
		} else if !form && r.ContentLength > 0 {
			// A raw body's length is the image's (net/http holds the body
			// to it; a form's counts its framing too): a raw image too
			// large for the target is refused before a byte is written,
			// as a file's is.
			o.SourceReaderSize = r.ContentLength
		}
		if async {
			h.runAsync(w, r, body, o)
		} else {
			h.runSync(w, r, body, o, false)
		}
	})
}

// filePart returns the multipart part named "file", streaming: parts
// before it are read and discarded (up to maxOtherPart each).
func filePart(r *http.Request) (*multipart.Part, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, fmt.Errorf("upload-form wants a multipart/form-data body: %v", err)
	}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil, fmt.Errorf("multipart form has no %q field", FormField)
		}
		if err != nil {
			return nil, fmt.Errorf("reading multipart form: %v", err)
		}
		if p.FormName() == FormField {
			return p, nil
		}
		if n, _ := io.Copy(io.Discard, io.LimitReader(p, maxOtherPart+1)); n > maxOtherPart {
			return nil, fmt.Errorf("multipart field %q before %q is larger than %d bytes", p.FormName(), FormField, maxOtherPart)
		}
	}
}

// importOptions builds one import from the template: the upload as the
// source, phases reported to the status, and received() called once the
// engine says the source is drained (all received and validated; what is
// left works on the target alone).
func (h *Handler) importOptions(body io.Reader) importer.Options {
	o := h.opts.Import
	o.Source = "-"
	o.SourceReader, o.SourceReaderName = body, "the upload"
	return o
}

// withEvents adds the handler's view of the import's events to o.
func (h *Handler) withEvents(o importer.Options, received func()) importer.Options {
	inner := o.Events
	o.Events = func(e importer.Event) {
		if inner != nil {
			inner(e)
		}
		switch e.Kind {
		case importer.EventPhaseStarted:
			// Complete and Error are the import's outcome, which finish
			// records once the import returned.
			if e.Phase != importer.PhaseComplete && e.Phase != importer.PhaseError {
				h.setPhase(string(e.Phase))
			}
		case importer.EventSourceDrained:
			received()
		}
	}
	return o
}

// runSync imports while the client waits: 200 only once the import is
// complete and synced. The client going away cancels the import. A clone
// is answered and recorded as one (Clone Complete), its BytesRead the
// bytes received on the wire.
func (h *Handler) runSync(w http.ResponseWriter, r *http.Request, body *gatedReader, o importer.Options, clone bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.opts.BaseContext, cancel)
	defer stop()
	res, err := importer.Import(ctx, h.withEvents(o, func() {}))
	body.close()
	if serr := body.stalled(); err != nil && serr != nil {
		// The expired read deadline also ends the request's context, and
		// the engine may report that cancellation first.
		err = serr
	} else if err != nil && r.Context().Err() != nil && h.opts.BaseContext.Err() == nil {
		err = errClientGone(err)
	}
	if clone {
		if res != nil {
			res.BytesRead = body.n.Load()
		}
		h.finishClone(res, err)
		h.respondClone(w, res, err)
		return
	}
	h.finish(res, err)
	h.respond(w, res, err)
}

// errClientGone names the cause of an import the request context stopped:
// the engine only sees a cancelled context.
func errClientGone(err error) error {
	return fmt.Errorf("the upload client disconnected before the image was complete: %w", err)
}

// runAsync answers once the upload is received and validated and lets the
// rest of the import (conversion, resize, sync) finish in the background.
func (h *Handler) runAsync(w http.ResponseWriter, r *http.Request, body *gatedReader, o importer.Options) {
	receivedCh := make(chan struct{})
	var once sync.Once
	received := func() { once.Do(func() { close(receivedCh) }) }
	type outcome struct {
		res *importer.Result
		err error
	}
	doneCh := make(chan outcome, 1)
	// The import must outlive the request, so it runs under BaseContext;
	// a client that disconnects during the transfer still fails it,
	// because reading the body fails.
	ctx, cancel := context.WithCancel(h.opts.BaseContext)
	var clientGone atomic.Bool
	stopOnDisconnect := context.AfterFunc(r.Context(), func() {
		select {
		case <-receivedCh:
		default:
			clientGone.Store(true)
			cancel()
		}
	})
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer cancel()
		res, err := importer.Import(ctx, h.withEvents(o, received))
		body.close()
		if serr := body.stalled(); err != nil && serr != nil {
			err = serr
		} else if err != nil && clientGone.Load() {
			err = errClientGone(err)
		}
		h.finishAsync(res, err)
		doneCh <- outcome{res, err}
	}()
	select {
	case <-receivedCh:
		stopOnDisconnect()
		// No read of the request body may happen once we return.
		body.close()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("upload received; the import finishes in the background (see " + PathStatus + ")\n"))
	case o := <-doneCh:
		stopOnDisconnect()
		h.respond(w, o.res, o.err)
	}
}

func (h *Handler) respond(w http.ResponseWriter, res *importer.Result, err error) {
	if err != nil {
		h.log.Warn("Upload import failed", "err", err)
		http.Error(w, statusText(err), httpStatus(err))
		return
	}
	h.log.Info("Upload import complete", "target", res.Target, "format", res.SourceFormat, "bytesRead", res.BytesRead)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(answerJSON(res, false), '\n'))
}

// archiveDir is where an archive upload is extracted: the target when it
// is a directory, else the directory of the target's image file (CDI:
// /data for DESTINATION=/data/disk.img).
func archiveDir(target string) string {
	if fi, err := os.Stat(target); err == nil && fi.IsDir() {
		return target
	}
	return filepath.Dir(target)
}

// httpStatus maps an import error to a response status: the client's
// fault (a bad or unsafe image, wrong checksum) is 400, no room is 507,
// everything else 500.
func httpStatus(err error) int {
	switch errtable.Classify(err) {
	case errtable.BadImage, errtable.ChecksumMismatch:
		return http.StatusBadRequest
	case errtable.TargetTooSmall, errtable.ScratchSpaceRequired:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// gatedReader counts the bytes received and can be closed so nothing reads
// the request body after its handler returned (net/http forbids it).
type gatedReader struct {
	mu       sync.Mutex
	r        io.Reader
	n        *atomic.Int64
	stall    *stallGuard
	closed   bool
	stallErr error // the stall that ended the upload, if one did
}

var errUploadClosed = errors.New("upload body already closed")

func (g *gatedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, errUploadClosed
	}
	g.stall.arm()
	n, err := g.r.Read(p)
	g.n.Add(int64(n))
	if err != nil && err != io.EOF {
		if serr := g.stall.explain(err); serr != err {
			g.stallErr = fmt.Errorf("receiving the upload: %w", serr)
			return n, g.stallErr
		}
		err = fmt.Errorf("receiving the upload: %w: %w", errdefs.ErrSourceUnreachable, err)
	}
	return n, err
}

// stalled returns the stall error that ended the upload, or nil.
func (g *gatedReader) stalled() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stallErr
}

func (g *gatedReader) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
