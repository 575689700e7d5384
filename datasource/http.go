package datasource

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/errdefs"
)

const (
	defaultStallTimeout = 5 * time.Minute
	defaultUserAgent    = "diskimport-engine"
	maxRedirects        = 10
)

// HTTPOptions configure an HTTP(S) source.
type HTTPOptions struct {
	// Username and Password are sent as basic auth. When both are empty,
	// user info in the URL (https://user:pw@host/...) is used instead.
	Username, Password string
	// Headers are extra request headers as "Name: value" lines (CDI's
	// IMPORTER_EXTRA_HEADER_n format). They are applied before basic auth,
	// so basic auth wins over an "Authorization:" line.
	Headers []string
	// CertDir: every *.crt and *.pem in it is added to the system pool.
	CertDir string
	// InsecureTLS skips server certificate verification.
	InsecureTLS bool
	// StallTimeout cancels the transfer when no byte arrives for this long
	// while the engine is waiting for one; <= 0 means 5 minutes.
	StallTimeout time.Duration
	// Retries bounds how many times a failed request or a broken transfer
	// is tried again, over the life of the source (every Open together):
	// connection errors, stalls, 5xx, 429 and 408 are retried; 401, 403,
	// 404, 410 and other statuses are not. 0 means 10; < 0 disables.
	Retries int
	// RetryBackoff is the first delay before a retry; it doubles for each
	// failure in a row (at most 30 s), with jitter. 0 means 1 s.
	RetryBackoff time.Duration
	// RetryMaxElapsed bounds one streak of failures (from the first failure
	// until bytes flow again); no retry starts past it. 0 means 5 minutes.
	RetryMaxElapsed time.Duration
	// UserAgent defaults to "diskimport-engine".
	UserAgent string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

type httpSource struct {
	url      *url.URL // user info removed; credentials live in user/pass
	redacted string
	origin   string
	user     string
	pass     string
	hasAuth  bool
	headers  http.Header
	ua       string
	stall    time.Duration
	log      *slog.Logger
	client   *http.Client
	// plain: the object is fetchable without anything but the URL (no
	// credentials, extra headers or private CA), so another client may read
	// it too.
	plain    bool
	insecure bool
	retry    retryPolicy
	retries  atomic.Int64 // retries so far, across every Open
}

// NewHTTP builds a source that fetches rawURL (http or https) with one GET
// per Open. Malformed options (URL, headers, certificate directory) fail
// here rather than at Open.
func NewHTTP(rawURL string, o HTTPOptions) (Source, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse errors quote the input, which may hold a password.
		return nil, fmt.Errorf("source URL is not a valid URL: %w", errdefs.ErrInvalidOptions)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("source URL %s: scheme %q is not http or https: %w", redactURL(u), u.Scheme, errdefs.ErrInvalidOptions)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("source URL %s has no host: %w", redactURL(u), errdefs.ErrInvalidOptions)
	}
	s := &httpSource{
		user:  o.Username,
		pass:  o.Password,
		ua:    o.UserAgent,
		stall: o.StallTimeout,
		log:   o.Logger,
		retry: newRetryPolicy(o),
	}
	if u.User != nil {
		if s.user == "" && s.pass == "" {
			s.user = u.User.Username()
			s.pass, _ = u.User.Password()
		}
		// Dropped from the URL so only our redirect policy decides where
		// credentials go.
		u.User = nil
	}
	s.hasAuth = s.user != "" || s.pass != ""
	s.url = u
	s.redacted = redactURL(u)
	s.origin = origin(u)
	if s.ua == "" {
		s.ua = defaultUserAgent
	}
	if s.stall <= 0 {
		s.stall = defaultStallTimeout
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.headers, err = parseHeaders(o.Headers); err != nil {
		return nil, err
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.InsecureTLS} //nolint:gosec // only when the caller asks
	if o.CertDir != "" {
		if tlsConf.RootCAs, err = certPool(o.CertDir, s.log); err != nil {
			return nil, err
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyFromEnvironment
	tr.TLSClientConfig = tlsConf
	tr.ProxyConnectHeader = http.Header{"User-Agent": {s.ua}}
	// The bytes must arrive as stored (checksums cover them, and the
	// engine peels compression itself), so never ask for gzip transfer.
	tr.DisableCompression = true
	// One GET per import: no idle connection (and its goroutines) should
	// outlive the stream that used it.
	tr.DisableKeepAlives = true
	s.client = &http.Client{Transport: tr, CheckRedirect: s.checkRedirect}
	s.plain = !s.hasAuth && len(s.headers) == 0 && o.CertDir == ""
	s.insecure = o.InsecureTLS
	return s, nil
}

func (s *httpSource) String() string { return s.redacted }

// origin is scheme://host:port with the default port filled in, the unit
// credentials are scoped to.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// credentialHeaders are dropped from any request to another origin, even
// when Go's client copied them there from the first request.
var credentialHeaders = [...]string{"Authorization", "Cookie", "Cookie2"}

// decorate sets the user agent, and on a request to the source's own origin
// the extra headers and the credentials (the first request, a redirect, or
// a range read). Extra headers are scoped like credentials: they are how
// tokens are passed (X-Auth-Token, pre-signed cookies…), so on a request to
// another origin they are removed, as Go removes Authorization.
func (s *httpSource) decorate(req *http.Request, sameOrigin bool) {
	if !sameOrigin {
		// Go's client copies the first request's headers onto a redirect
		// and only strips Authorization and cookies, and only for another
		// host name (a different port is the same host to it).
		for k := range s.headers {
			req.Header.Del(k)
		}
		for _, k := range credentialHeaders {
			req.Header.Del(k)
		}
		req.Header.Set("User-Agent", s.ua)
		return
	}
	req.Header.Set("User-Agent", s.ua)
	for k, v := range s.headers {
		req.Header[k] = slices.Clone(v)
	}
	if s.hasAuth {
		req.SetBasicAuth(s.user, s.pass)
	}
}

func (s *httpSource) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects: %w", maxRedirects, errdefs.ErrSourceRefused)
	}
	same := origin(req.URL) == s.origin
	if !same && (s.hasAuth || len(s.headers) > 0) {
		s.log.Info("redirected to another origin, not sending credentials or extra headers",
			"from", s.redacted, "to", redactURL(req.URL), "dropped_headers", slices.Sorted(maps.Keys(s.headers)))
	}
	s.decorate(req, same)
	return nil
}

// Open sends the GET, retrying what may pass (connection errors, stalls,
// 5xx, 429). The stall watchdog already runs while waiting for the response
// headers.
func (s *httpSource) Open(ctx context.Context) (*Stream, error) {
	life, kill := context.WithCancelCause(ctx)
	b := &httpBody{src: s, parent: ctx, life: life, kill: kill, size: -1}
	if err := b.connect(); err != nil {
		kill(nil)
		return nil, err
	}
	resp := b.cur.resp
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(strings.ToLower(ct), "text/") {
		s.log.Warn("HTTP source serves a text content type; it may be an error page rather than an image",
			"url", s.redacted, "content_type", ct)
	}
	s.log.Debug("HTTP source answered", "url", s.redacted, "status", resp.Status, "content_length", resp.ContentLength,
		"etag", resp.Header.Get("ETag"), "last_modified", resp.Header.Get("Last-Modified"), "accept_ranges", resp.Header.Get("Accept-Ranges"))
	b.size = resp.ContentLength
	b.etag = strongETag(resp.Header.Get("ETag"))
	b.lastMod = resp.Header.Get("Last-Modified")
	st := &Stream{Body: b, Size: b.size}
	// The object may be read in place (httprange.go) when the server
	// serves ranges of an object of known size.
	if b.size > 0 && strings.EqualFold(resp.Header.Get("Accept-Ranges"), "bytes") {
		st.Ranged = &RangedURL{URL: resp.Request.URL.String(), InsecureTLS: s.insecure, Plain: s.plain,
			Size: b.size, src: s, etag: b.etag, lastMod: b.lastMod}
	}
	return st, nil
}

// Retries reports how many requests were re-sent after a failure.
func (s *httpSource) Retries() int { return int(s.retries.Load()) }

// requestError classifies a failed client.Do: caller cancellation, stall,
// refusal from the redirect policy, or an unreachable server.
func (s *httpSource) requestError(parent, reqCtx context.Context, err error) error {
	if perr := parent.Err(); perr != nil {
		return cancelError(s.redacted, perr)
	}
	if cause := context.Cause(reqCtx); cause != nil && errors.Is(cause, errdefs.ErrSourceUnreachable) {
		return cause
	}
	// url.Error prints the full URL, query secrets included; use ours.
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	if errors.Is(err, errdefs.ErrSourceRefused) {
		return fmt.Errorf("GET %s: %w", s.redacted, err)
	}
	return fmt.Errorf("GET %s: %w: %w", s.redacted, errdefs.ErrSourceUnreachable, err)
}
