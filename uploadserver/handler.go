// Package uploadserver receives one disk image (or archive) over HTTP and
// imports it with the engine as it arrives, never buffering the whole
// upload. It serves the paths of CDI's upload server: a raw request body at
// /v1beta1/upload, a multipart form field "file" at /v1beta1/upload-form,
// asynchronous variants of both, archives at /v1beta1/upload-archive, HEAD
// on each, the import status at /v1beta1/status and /healthz. With CDI's
// x-cdi-content-type header /v1beta1/upload receives a host-assisted
// clone (serveClone: CDI's snappy stream; serveSparseClone: our resumable,
// verified sparse-v2). Clients may be held to a client certificate
// (Server.ClientCAFile) and a bearer token. A completed upload or clone is
// answered with an Answer (JSON), a failure with a plain-text status.
//
// It is for programs that take disks over HTTP themselves: a controller
// or service that mounts Handler in its own server, or runs Server (the
// importer binary's upload-server command and CDI's upload-server pod do).
package uploadserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/importer"
)

// Paths served.
const (
	PathUpload          = "/v1beta1/upload"
	PathUploadAsync     = "/v1beta1/upload-async"
	PathUploadForm      = "/v1beta1/upload-form"
	PathUploadFormAsync = "/v1beta1/upload-form-async"
	// PathUploadArchive takes a tar stream extracted into the target's
	// directory (CDI's archive upload); PathUploadArchiveAsync is ours.
	PathUploadArchive      = "/v1beta1/upload-archive"
	PathUploadArchiveAsync = "/v1beta1/upload-archive-async"
	PathStatus             = "/v1beta1/status"
	PathHealthz            = "/healthz"
)

// FormField is the multipart field that carries the image.
const FormField = "file"

// Options configure a Handler.
type Options struct {
	// Import is the template of every import: Target and the other options
	// apply; Source and SourceReader are set per upload. Its Events, if
	// set, still get every event.
	Import importer.Options
	// ClientName, when set, turns on client authentication on the upload
	// paths: the request must come over TLS with a client certificate the
	// server verified (Server sets ClientCAs and asks for one) whose common
	// name or a DNS name is ClientName, else it is refused with 401 before
	// its body is read. This is how CDI's upload proxy and cloner
	// authenticate (CLIENT_CERT_FILE and CLIENT_NAME).
	ClientName string
	// RequireClientCert refuses upload requests without a verified client
	// certificate even when ClientName is empty (any name the CA signed).
	RequireClientCert bool
	// Token, when set, must be presented as "Authorization: Bearer TOKEN"
	// on every path but /healthz.
	Token string
	// KeepRunning accepts further uploads after a successful import;
	// otherwise Done is closed after the first success and later uploads
	// are refused.
	KeepRunning bool
	// BaseContext bounds every import (asynchronous ones outlive their
	// request); default context.Background().
	BaseContext context.Context
	// OnResult, when set, is called after every import attempt, before the
	// next upload is accepted (the CLI writes the termination log here).
	OnResult func(*importer.Result, error)
	// Logger; default slog.Default().
	Logger *slog.Logger
	// CloneResumeWindow is how long an interrupted sparse-v2 clone is kept
	// for its resumption; default 5 minutes.
	CloneResumeWindow time.Duration
	// ResultGrace: once an asynchronous import succeeded, Done waits until
	// a status request was answered Complete, or this long at most, so that
	// a client following the status (importer upload --async) sees the
	// result before the server stops. 0: Done at once, as CDI's server
	// stops (its client learns the result from the DataVolume).
	ResultGrace time.Duration
}

// atomicCounter counts an upload's bytes.
type atomicCounter = atomic.Int64

// Status is what GET /v1beta1/status returns.
type Status struct {
	// Phase is "Idle" before the first upload, the engine's phase while an
	// import runs, then "Complete" or "Error".
	Phase string `json:"phase"`
	// Bytes counts the bytes received of the current (or last) upload.
	Bytes int64 `json:"bytes"`
	// Error is the cause of the last failed import.
	Error    string `json:"error,omitempty"`
	Busy     bool   `json:"busy"`
	Complete bool   `json:"complete"`
}

// Handler is the upload server's http.Handler.
type Handler struct {
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	mu        sync.Mutex
	busy      bool
	status    Status
	last      *importer.Result
	lastOK    bool
	lastErr   error
	bytes     *atomicCounter // of the current upload
	lastClone bool           // the last import was a clone
	closed    bool           // the deadline passed: no new upload
	clone     *cloneSession  // an interrupted clone waiting to resume

	done     chan struct{}
	doneOnce sync.Once
	// resultUnread: an asynchronous import's result is to be read from
	// the status before Done (Options.ResultGrace).
	resultUnread bool
	wg           sync.WaitGroup // background (async) imports
}

// NewHandler builds a Handler.
func NewHandler(o Options) *Handler {
	if o.BaseContext == nil {
		o.BaseContext = context.Background()
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.Import.Logger == nil {
		o.Import.Logger = log
	}
	h := &Handler{opts: o, log: log, mux: http.NewServeMux(), done: make(chan struct{}),
		status: Status{Phase: "Idle"}, bytes: new(atomic.Int64)}
	h.mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("OK\n"))
	})
	h.mux.Handle("GET "+PathStatus, h.auth(http.HandlerFunc(h.serveStatus)))
	for _, r := range uploadRoutes {
		for _, path := range r.paths {
			for _, method := range r.methods {
				h.mux.Handle(method+" "+path, h.auth(h.uploadHandler(r.kind)))
			}
			h.mux.Handle("HEAD "+path, h.auth(http.HandlerFunc(h.serveHead)))
		}
	}
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Done is closed after the first successful import unless KeepRunning.
func (h *Handler) Done() <-chan struct{} { return h.done }

// Wait blocks until background imports have finished.
func (h *Handler) Wait() { h.wg.Wait() }

// Status returns the current status.
func (h *Handler) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.status
	s.Busy = h.busy
	s.Bytes = h.bytes.Load()
	return s
}

// LastWasClone reports whether the last import was a clone (its
// termination message says Clone Complete).
func (h *Handler) LastWasClone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastClone
}

// Last returns the last import's result and error (nil, nil before any),
// and whether it succeeded.
func (h *Handler) Last() (*importer.Result, error, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.lastErr, h.lastOK
}

// auth checks the client certificate (when one is required) and the bearer
// token (when set) before anything of the request is read.
func (h *Handler) auth(next http.Handler) http.Handler {
	want := []byte("Bearer " + h.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h.checkClientCert(r); err != nil {
			h.log.Warn("Upload request refused", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if h.opts.Token != "" {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="upload"`)
				http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) serveStatus(w http.ResponseWriter, _ *http.Request) {
	st := h.Status()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
	if st.Complete {
		h.mu.Lock()
		unread := h.resultUnread
		h.resultUnread = false
		h.mu.Unlock()
		if unread {
			// The server stops after this answer went out: Shutdown waits
			// for the responses in flight.
			h.closeDone()
		}
	}
}

// errBusy and errFinished refuse an upload before it starts.
var (
	errBusy     = errors.New("an upload is already in progress")
	errFinished = errors.New("an import already completed; the server accepts no more uploads")
)

// begin claims the server for one upload.
func (h *Handler) begin() (*atomic.Int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy {
		return nil, errBusy
	}
	if h.lastOK && !h.opts.KeepRunning {
		return nil, errFinished
	}
	if h.closed {
		return nil, errDeadline
	}
	if h.clone != nil {
		return nil, errBusy // only the interrupted clone may resume
	}
	h.busy = true
	h.lastClone = false
	h.bytes = new(atomic.Int64)
	h.status = Status{Phase: "Info"}
	return h.bytes, nil
}

// setPhase records the import's phase; an interrupted clone stays
// Interrupted (its import, waiting for the resumption, may still report
// the phase it entered before).
func (h *Handler) setPhase(p string) {
	h.mu.Lock()
	if h.clone == nil {
		h.status.Phase = p
	}
	h.mu.Unlock()
}

// release ends an upload that never reached the engine.
func (h *Handler) release(err error) {
	h.mu.Lock()
	h.busy = false
	h.status.Phase = "Error"
	h.status.Error = err.Error()
	h.mu.Unlock()
}

// finish records an import's outcome and frees the server for the next
// upload (after OnResult, so its report is written first).
func (h *Handler) finish(res *importer.Result, err error) {
	if h.opts.OnResult != nil {
		h.opts.OnResult(res, err)
	}
	h.mu.Lock()
	h.last, h.lastErr, h.lastOK = res, err, err == nil
	h.busy = false
	if err != nil {
		h.status.Phase, h.status.Error, h.status.Complete = "Error", err.Error(), false
		h.resultUnread = false
	} else {
		h.status.Phase, h.status.Error, h.status.Complete = "Complete", "", true
	}
	unread := h.resultUnread
	h.mu.Unlock()
	switch {
	case err != nil || h.opts.KeepRunning:
	case unread:
		time.AfterFunc(h.opts.ResultGrace, h.closeDone)
	default:
		h.closeDone()
	}
}

// finishAsync is finish for an asynchronous import, whose client learns
// the result from the status (Options.ResultGrace).
func (h *Handler) finishAsync(res *importer.Result, err error) {
	h.mu.Lock()
	h.resultUnread = err == nil && h.opts.ResultGrace > 0 && !h.opts.KeepRunning
	h.mu.Unlock()
	h.finish(res, err)
}

// closeDone closes Done, once.
func (h *Handler) closeDone() { h.doneOnce.Do(func() { close(h.done) }) }

// statusText shortens an error for a plain-text response body.
func statusText(err error) string {
	return strings.TrimSpace(err.Error()) + "\n"
}
