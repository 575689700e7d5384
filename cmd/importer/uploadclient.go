package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/units"
	"github.com/diskimport/engine/uploadserver"
)

// uploadClientFlags are `importer upload`'s flags.
type uploadClientFlags struct {
	url                string
	ca, cert, key      string
	token, tokenFile   string
	insecureTLS        bool
	async, form        bool
	statusPoll         time.Duration
	json, quiet        bool
	verbose            int
	logFormat          string
	contentTypeHeader  string
	headers            []string
	statusPollDeadline time.Duration
	stallTimeout       time.Duration
}

// Phases the upload's progress shows (the bar's label and the progress
// lines' phase).
const (
	phaseUpload  importer.Phase = "Upload"
	phaseWaiting importer.Phase = "WaitingForServer"
)

// newUploadClientCommand is `importer upload [flags] FILE [URL]`: send an
// image to an upload server (ours, CDI's upload proxy or upload pod) and
// wait for the import's result, as virtctl image-upload does for CDI.
func newUploadClientCommand(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, code *int) *cobra.Command {
	var f uploadClientFlags
	cmd := &cobra.Command{
		Use:   "upload [flags] FILE [URL]",
		Short: "Send an image to an upload server (ours or CDI's) and wait for the result",
		Long: `Send FILE (or - for standard input) to an upload server: ours
(importer upload-server), CDI's upload proxy or an upload pod. URL is the
server (https://host:8443: the path is chosen by --async and --form) or a
full upload URL (https://cdi-uploadproxy/v1beta1/upload), as an argument or
--url.

  /v1beta1/upload             (default) the raw body; the server answers once
                              the import is complete and synced
  /v1beta1/upload-async       (--async) the server answers once it received
                              and validated the data; the command then polls
                              /v1beta1/status until it says the import ended
                              (ours answers it until read; a server without
                              it: CDI's, where the DataVolume says)
  /v1beta1/upload-form[-async] (--form) a multipart form, field "file"

Mutual TLS: --ca (the CA of the server's certificate; default: the system's),
--cert and --key (the client certificate). CDI's upload proxy takes the
token of an UploadTokenRequest: --token-file (sent as Authorization: Bearer).
The token, --header values and a URL's user:password go only to the URL's
origin (scheme, host and port), across redirects too, as an import's
credentials do.

Every request is bounded: a HEAD or status request not answered, a body the
server stops taking and an answer that stops arriving fail after
--stall-timeout; the wait for the result after the last byte is bounded
only by --wait.

Exit status: 0 when the server reports the import complete, 1 when the
upload or the import failed (the server's answer is shown) or its result
could not be read, 2 for bad usage,
130 after Ctrl-C and 143 after SIGTERM.`,
		Args:          cobra.RangeArgs(1, 2),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			target := f.url
			if len(args) == 2 {
				if target != "" {
					*code = cdi.ExitUsage
					return errors.New("give the URL as an argument or as --url, not both")
				}
				target = args[1]
			}
			if target == "" {
				*code = cdi.ExitUsage
				return errors.New("URL is required (an argument or --url)")
			}
			*code = runUploadClient(ctx, f, args[0], target, stdin, stdout, stderr)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "", "the upload server or upload URL (instead of the URL argument)")
	fl.StringVar(&f.ca, "ca", "", "PEM file of the CA that signed the server's certificate (default: the system's CAs)")
	fl.StringVar(&f.cert, "cert", "", "PEM client certificate file (mutual TLS; with --key)")
	fl.StringVar(&f.key, "key", "", "PEM client key file")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (CDI's upload proxy: the UploadTokenRequest's token)")
	fl.StringVar(&f.token, "token", "", "the bearer token itself (visible to other users in ps; prefer --token-file)")
	fl.BoolVar(&f.insecureTLS, "insecure-tls", false, "do not verify the server's certificate")
	fl.BoolVar(&f.async, "async", false, "use the asynchronous path: the server answers once the data is received, then the status is polled")
	fl.BoolVar(&f.form, "form", false, "send a multipart form (field \"file\") instead of the raw body")
	fl.StringArrayVar(&f.headers, "header", nil, "extra request header 'Name: value'; repeatable")
	fl.StringVar(&f.contentTypeHeader, "cdi-content-type", "", "CDI's x-cdi-content-type header (for a clone stream; default: none, a disk image)")
	fl.DurationVar(&f.statusPoll, "status-interval", 500*time.Millisecond, "with --async: how often the server's status is read")
	fl.DurationVar(&f.statusPollDeadline, "wait", 0, "give up waiting for the import's result after this long: from the last byte sent, or with --async polling the status (default: no limit)")
	fl.DurationVar(&f.stallTimeout, "stall-timeout", defaultUploadStall, "fail a request that makes no progress for this long: a HEAD or status request not answered, a body the server stops taking, an answer that stops arriving")
	fl.BoolVar(&f.json, "json", false, "print the server's result JSON on standard output")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress and no summary: only errors")
	fl.CountVarP(&f.verbose, "verbose", "v", "log the requests (-vv: debug)")
	fl.StringVar(&f.logFormat, "log-format", logFormatText, "log lines as text or json")
	_ = fl.MarkHidden("cdi-content-type")
	return cmd
}

// uploadOutcome is what the server said of an upload.
type uploadOutcome struct {
	sent     int64
	duration time.Duration
	// answer is the server's body: our server's result JSON for a
	// synchronous upload, its status JSON after an asynchronous one.
	answer []byte
	// note says how the result is known ("the server's status says
	// Complete") when it is not the synchronous answer.
	note string
}

// runUploadClient sends one upload and reports it; it returns the exit code.
func runUploadClient(ctx context.Context, f uploadClientFlags, file, target string, stdin io.Reader, stdout, stderr io.Writer) int {
	progress := newProgressOutputs(stderr, f.quiet)
	w := progress.logWriter(stderr)
	log, err := newFormatLogger(w, f.logFormat, cliLogLevel(f.verbose, f.quiet))
	if err != nil {
		progress.finish(nil, err)
		fmt.Fprintln(stderr, "importer:", err)
		return cdi.ExitUsage
	}
	up, err := newUploadRequest(f, file, target, stdin, log)
	if err != nil {
		progress.finish(nil, err)
		fmt.Fprintln(stderr, "importer: upload:", err)
		return cdi.CLIExitCode(err)
	}
	defer up.close()
	lines, _ := newFormatLogger(w, f.logFormat, slog.LevelInfo)
	progress.start(cdi.MetricsConfig{Listen: "off"}, log, lines, f.quiet)
	out, err := up.send(ctx, log, progress.observe)
	if err == nil {
		progress.tracker.Complete()
	}
	progress.finish(nil, err)
	records := f.logFormat == logFormatJSON // the ending is a record too: every line of stderr is JSON
	if err != nil {
		switch {
		case records:
			lines.Error("upload failed", "error", err.Error(), "cancelled", ctx.Err() != nil)
		case ctx.Err() != nil:
			fmt.Fprintln(stderr, "importer: upload cancelled")
		default:
			fmt.Fprintln(stderr, "importer: upload failed:", err)
		}
		return cdi.ExitFailed
	}
	if f.json {
		fmt.Fprintln(stdout, strings.TrimSpace(string(out.answer)))
	}
	switch {
	case f.quiet:
	case records:
		lines.Info("Upload complete", "file", up.file, "url", up.url.Redacted(), "bytesSent", out.sent,
			"durationSeconds", out.duration.Seconds(), "note", out.note)
	default:
		fmt.Fprintln(stderr, uploadSummary(up, out))
	}
	return cdi.ExitOK
}

// defaultUploadStall is --stall-timeout's default, the import's own
// (--stall-timeout of an import).
const defaultUploadStall = 5 * time.Minute

// uploadRequest is one upload: where to, the body, and the client.
type uploadRequest struct {
	file  string
	url   *url.URL // user info removed: credentials live in scope
	async bool
	form  bool
	body  io.ReadCloser
	size  int64 // -1: unknown (standard input)
	// client follows redirects under scope's rule, which also decorates
	// every request: the token, --header values and the URL's user info
	// go only to the URL's origin, as an import source's credentials do.
	client *http.Client
	scope  *datasource.RequestScope
	// withCert: a client certificate was given (a 401 then says it was
	// not accepted).
	withCert bool
	poll     time.Duration
	maxWait  time.Duration
	stall    time.Duration
}

// newUploadRequest checks the flags and opens the file.
func newUploadRequest(f uploadClientFlags, file, target string, stdin io.Reader, log *slog.Logger) (*uploadRequest, error) {
	u, err := uploadURL(target, f.async, f.form)
	if err != nil {
		return nil, err
	}
	up := &uploadRequest{file: file, url: u, poll: f.statusPoll, maxWait: f.statusPollDeadline, stall: f.stallTimeout,
		withCert: f.cert != ""}
	if up.stall <= 0 {
		up.stall = defaultUploadStall
	}
	up.async = strings.HasSuffix(u.Path, "-async")
	up.form = strings.Contains(u.Path, "/upload-form")
	header, err := datasource.ParseHeaders(f.headers)
	if err != nil {
		return nil, fmt.Errorf("--header: %w", err)
	}
	if f.contentTypeHeader != "" {
		header.Set(uploadserver.HeaderContentType, f.contentTypeHeader)
	}
	token := f.token
	if f.tokenFile != "" {
		if token != "" {
			return nil, fmt.Errorf("--token and --token-file: give one: %w", errdefs.ErrInvalidOptions)
		}
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return nil, fmt.Errorf("--token-file %s is empty: %w", f.tokenFile, errdefs.ErrInvalidOptions)
		}
	}
	if token != "" {
		header.Set("Authorization", "Bearer "+token)
	}
	// The URL's user:password is basic auth unless a token was given (as
	// Go's client did it), and is scoped like the token.
	var user, pass string
	if u.User != nil {
		if header.Get("Authorization") == "" {
			user = u.User.Username()
			pass, _ = u.User.Password()
		}
		u.User = nil
	}
	up.scope = datasource.NewRequestScope(u, header, user, pass, "", log)
	if up.client, err = uploadHTTPClient(f, up.scope); err != nil {
		return nil, err
	}
	if file == "-" {
		up.body, up.size, up.file = io.NopCloser(stdin), -1, "standard input"
		return up, nil
	}
	fh, err := os.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("file %s does not exist: %w", file, errdefs.ErrInvalidOptions)
		}
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidOptions)
	}
	st, err := fh.Stat()
	if err != nil || !st.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("%s is not a regular file: %w", file, errdefs.ErrInvalidOptions)
	}
	up.body, up.size = fh, st.Size()
	return up, nil
}

func (up *uploadRequest) close() { up.body.Close() }

// uploadURL is the upload path at target: the path asked for when target
// has one, else the one --async and --form choose.
func uploadURL(target string, async, form bool) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q: want http(s)://host[:port][/path]: %w", target, errdefs.ErrInvalidOptions)
	}
	if u.Path != "" && u.Path != "/" {
		if async || form {
			return nil, fmt.Errorf("URL %s names its path: --async and --form only choose a path for a URL without one: %w", target, errdefs.ErrInvalidOptions)
		}
		return u, nil
	}
	switch {
	case form && async:
		u.Path = uploadserver.PathUploadFormAsync
	case form:
		u.Path = uploadserver.PathUploadForm
	case async:
		u.Path = uploadserver.PathUploadAsync
	default:
		u.Path = uploadserver.PathUpload
	}
	return u, nil
}

// uploadHTTPClient is the project's transport (proxy from the
// environment, bytes sent as they are) with the upload's TLS: the server's
// CA and the client certificate, and scope's redirect rule. No timeout of
// its own: each request has its requestBound (a synchronous upload is
// answered only once the import is complete).
func uploadHTTPClient(f uploadClientFlags, scope *datasource.RequestScope) (*http.Client, error) {
	tr, err := datasource.NewTransport(datasource.Config{Access: datasource.Access{InsecureTLS: f.insecureTLS}})
	if err != nil {
		return nil, err
	}
	if (f.cert == "") != (f.key == "") {
		return nil, fmt.Errorf("--cert and --key go together: %w", errdefs.ErrInvalidOptions)
	}
	var pem [3][]byte
	for i, name := range []string{f.cert, f.key, f.ca} {
		if name == "" {
			continue
		}
		if pem[i], err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidOptions)
		}
	}
	conf, err := cdi.ClientTLS(pem[0], pem[1], pem[2])
	if err != nil {
		return nil, err
	}
	conf.InsecureSkipVerify = f.insecureTLS //nolint:gosec // only when the user asks
	tr.TLSClientConfig = conf
	return &http.Client{Transport: tr, CheckRedirect: scope.CheckRedirect}, nil
}

// send uploads the body, reporting the bytes sent to observe, and waits
// for the import's result.
func (up *uploadRequest) send(ctx context.Context, log *slog.Logger, observe func(importer.Progress)) (*uploadOutcome, error) {
	start := time.Now()
	sent := iostage.NewCounter(up.body)
	report := func(phase importer.Phase) {
		n := sent.Count()
		pct := -1.0
		if up.size > 0 {
			pct = min(99, float64(n)*100/float64(up.size))
		} else if up.size == 0 {
			pct = 0
		}
		observe(importer.Progress{Phase: phase, BytesRead: n, SourceSize: up.size, Percent: pct, PhasePercent: pct})
	}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			phase := phaseUpload
			if up.size >= 0 && sent.Count() >= up.size {
				phase = phaseWaiting // every byte sent: the server imports
			}
			report(phase)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	log.Info("Upload starting", "file", up.file, "url", up.url.Redacted(), "size", up.size)
	answer, err := up.probe(ctx)
	if err == nil {
		answer, err = up.post(ctx, sent, up.size, up.form)
	}
	close(stop)
	<-sampled
	report(phaseWaiting) // the bar ends on the bytes sent, not the last sample
	out := &uploadOutcome{sent: sent.Count(), answer: answer}
	if err != nil {
		return out, up.explain(err, out.sent)
	}
	if up.async {
		if err := up.waitStatus(ctx, out); err != nil {
			return out, err
		}
	}
	out.duration = time.Since(start)
	return out, nil
}

// probe sends HEAD to the upload path before any byte of the image: the
// TLS handshake and the server's authorization are settled on a request
// with no body. Under TLS 1.3 a server that refuses the client certificate
// says so after the handshake, and a client already writing a body sees
// only the closed connection (measured: "use of closed network
// connection" after 608 KiB, the alert lost). Any answer but 401/403 lets
// the upload go ahead: CDI's server answers HEAD on its synchronous paths
// with 404.
func (up *uploadRequest) probe(ctx context.Context) ([]byte, error) {
	bound := newRequestBound(ctx, up.stall, fmt.Sprintf("HEAD %s: no answer within --stall-timeout %s", up.url.Redacted(), up.stall))
	defer bound.stop()
	req, err := http.NewRequestWithContext(bound.ctx, http.MethodHead, up.url.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidOptions)
	}
	up.scope.Decorate(req)
	resp, err := up.client.Do(req)
	if err != nil {
		return nil, bound.explain(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return nil, nil
	}
	// A HEAD answer has no text: the same request with an empty body
	// fetches the server's reason, refused by the same check.
	answer, err := up.post(ctx, http.NoBody, 0, false)
	if err == nil {
		err = &uploadRefusedError{status: resp.Status, code: resp.StatusCode, url: up.url.Redacted(), withCert: up.withCert}
	}
	return answer, err
}

// post sends body (of length bytes, -1: unknown; as a multipart form
// when form) and returns the answer of a 2xx; any other status is an error
// carrying the server's text. The request is bounded: --stall-timeout
// while the server takes the body and while its answer arrives, --wait
// (when given) between the last byte sent and the answer.
func (up *uploadRequest) post(ctx context.Context, body io.Reader, length int64, form bool) ([]byte, error) {
	bound := newRequestBound(ctx, up.stall, fmt.Sprintf("POST %s: the server took no byte of the upload for --stall-timeout %s: the import did not complete", up.url.Redacted(), up.stall))
	defer bound.stop()
	if body != http.NoBody { // an empty body stays one (no chunked encoding)
		body = &boundReader{r: body, b: bound, atEOF: func() {
			bound.arm(stageWaiting, up.maxWait, fmt.Sprintf("POST %s: every byte was sent and the server did not answer within --wait %s", up.url.Redacted(), up.maxWait))
		}}
	}
	var contentType string
	if form {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		contentType = mw.FormDataContentType()
		file := body
		go func() {
			part, err := mw.CreateFormFile(uploadserver.FormField, "image")
			if err == nil {
				_, err = io.Copy(part, file)
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		body, length = pr, -1
		defer pr.Close()
	}
	req, err := http.NewRequestWithContext(bound.ctx, http.MethodPost, up.url.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidOptions)
	}
	up.scope.Decorate(req)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	} else {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if length >= 0 {
		req.ContentLength = length
	}
	resp, err := up.client.Do(req)
	if err != nil {
		return nil, bound.explain(err)
	}
	defer resp.Body.Close()
	if resp.Request.Method != http.MethodPost {
		// A 301, 302 or 303 turns the upload into a GET of the place it
		// points to: its answer says nothing of an image never sent there.
		return nil, fmt.Errorf("the server redirected the upload to %s as a %s: the image was not sent there: %w", resp.Request.URL.Redacted(), resp.Request.Method, errdefs.ErrSourceRefused)
	}
	bound.arm(stageAnswering, up.stall, fmt.Sprintf("POST %s: the server's answer stopped arriving for --stall-timeout %s", up.url.Redacted(), up.stall))
	answer, rerr := io.ReadAll(io.LimitReader(&boundReader{r: resp.Body, b: bound}, 1<<20))
	rerr = bound.explain(rerr)
	if resp.StatusCode/100 != 2 {
		return answer, &uploadRefusedError{status: resp.Status, code: resp.StatusCode, url: up.url.Redacted(),
			body: strings.TrimSpace(string(answer)), withCert: up.withCert}
	}
	if rerr != nil {
		return answer, fmt.Errorf("reading the server's answer: %w", rerr)
	}
	return answer, nil
}

// waitStatus follows an asynchronous upload's import on the server's
// status path until it ends: Complete only when the status says so, an
// error naming the server's cause when it says the import failed. A
// server without one (CDI's upload proxy and pod answer 404) leaves the
// result unknown: received is all it said (CDI's client reads the
// DataVolume's phase). Our server answers the status until it was read
// Complete (uploadserver.Options.ResultGrace), so a status that cannot be
// read is a failure: the result was not seen. So is a status request that
// gets no answer, and --wait passing, even in the middle of one.
func (up *uploadRequest) waitStatus(ctx context.Context, out *uploadOutcome) error {
	su := *up.url
	su.Path, su.RawQuery = uploadserver.PathStatus, ""
	wctx := ctx
	if up.maxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, up.maxWait)
		defer cancel()
	}
	phase := "none read"
	for {
		st, code, err := up.readStatus(wctx, &su)
		var stalled *boundError
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil && wctx.Err() != nil:
			return fmt.Errorf("the import did not end within --wait %s (last status: phase %s; the status request at %s was not answered)", up.maxWait, phase, su.Redacted())
		case errors.As(err, &stalled):
			return err
		case err != nil:
			return fmt.Errorf("the server received the upload, then its status at %s could not be read (last status: phase %s), so the import's result is unknown: %w", su.Redacted(), phase, err)
		case code == http.StatusNotFound:
			out.note = "the server received it and has no status path (CDI's: the DataVolume's phase tells the result)"
			return nil
		case code != http.StatusOK:
			return fmt.Errorf("reading the status at %s: the server answered %d", su.Redacted(), code)
		case st.Complete:
			out.note = "the server's status says Complete"
			out.answer, _ = json.Marshal(st)
			return nil
		case st.Phase == "Error" && !st.Busy:
			out.answer, _ = json.Marshal(st)
			return fmt.Errorf("the server received the upload and its import failed: %s", st.Error)
		}
		phase = st.Phase
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			return fmt.Errorf("the import did not end within --wait %s (last status: phase %s)", up.maxWait, phase)
		case <-time.After(up.poll):
		}
	}
}

func (up *uploadRequest) readStatus(ctx context.Context, u *url.URL) (uploadserver.Status, int, error) {
	var st uploadserver.Status
	bound := newRequestBound(ctx, up.stall, fmt.Sprintf("reading the status at %s: no answer within --stall-timeout %s", u.Redacted(), up.stall))
	defer bound.stop()
	req, err := http.NewRequestWithContext(bound.ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return st, 0, err
	}
	up.scope.Decorate(req)
	resp, err := up.client.Do(req)
	if err != nil {
		return st, 0, bound.explain(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, resp.StatusCode, nil
	}
	if err := json.NewDecoder(io.LimitReader(&boundReader{r: resp.Body, b: bound}, 1<<20)).Decode(&st); err != nil {
		return st, resp.StatusCode, fmt.Errorf("the status is not JSON: %w", bound.explain(err))
	}
	return st, resp.StatusCode, nil
}

// uploadSummary is the success line: "Upload complete: disk.qcow2 to
// https://host:8443/v1beta1/upload, 12.0 MiB sent in 1.2 s, 10.0 MiB/s;
// the server imported qcow2, 64.0 MiB".
func uploadSummary(up *uploadRequest, out *uploadOutcome) string {
	line := fmt.Sprintf("Upload complete: %s to %s, %s sent in %.1f s, %s", up.file, up.url.Redacted(),
		units.Bytes(out.sent), out.duration.Seconds(), units.Rate(averageRate(out.sent, out.duration)))
	var m uploadserver.Answer
	if !up.async && json.Unmarshal(out.answer, &m) == nil && m.Message != "" {
		line += fmt.Sprintf("; the server says %s: %s", m.Message, units.Bytes(m.VirtualSize))
		if m.SourceFormat != "" {
			var layers []string
			if m.Compression != "" {
				layers = strings.Split(m.Compression, ",")
			}
			line += " (" + m.SourceFormat + compressionSuffix(layers) + ")"
		}
		if m.ContentDigest != "" {
			line += ", " + m.ContentDigest
		}
	}
	if out.note != "" {
		line += "; " + out.note
	}
	return line
}
