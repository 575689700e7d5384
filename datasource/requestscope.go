package datasource

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"

	"github.com/diskimport/engine/errdefs"
)

// RequestScope is the rule every request of an HTTP client of this project
// follows (the HTTP source's, its range reads', `importer upload`'s): the
// user agent always; the extra headers and the credentials (basic auth,
// and whatever the extra headers carry: a bearer token, X-Auth-Token,
// cookies) only to the origin (scheme, host, port) of the URL they were
// given for. A redirect is followed at most maxRedirects times, without
// Referer (it would carry a pre-signed URL's query), and one to another
// origin goes without them: Go's client keeps every extra header on any
// host and Authorization on another port of the same host.
type RequestScope struct {
	origin   string
	redacted string
	user     string
	pass     string
	hasAuth  bool
	headers  http.Header
	ua       string
	log      *slog.Logger
}

// credentialHeaders are dropped from any request to another origin, even
// when Go's client copied them there from the first request.
var credentialHeaders = [...]string{"Authorization", "Cookie", "Cookie2"}

// NewRequestScope scopes headers, and basic auth of user and pass when
// either is set, to u's origin; every request gets userAgent (the
// project's when ""). Requests elsewhere are logged on log.
func NewRequestScope(u *url.URL, headers http.Header, user, pass, userAgent string, log *slog.Logger) *RequestScope {
	if userAgent == "" {
		userAgent = defaultUserAgent
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RequestScope{origin: origin(u), redacted: redactURL(u), user: user, pass: pass, hasAuth: user != "" || pass != "",
		headers: headers.Clone(), ua: userAgent, log: log}
}

// Scoped reports whether the scope holds anything a request elsewhere
// must not carry.
func (s *RequestScope) Scoped() bool { return s.hasAuth || len(s.headers) > 0 }

// SameOrigin reports whether u is at the origin the scope is for.
func (s *RequestScope) SameOrigin(u *url.URL) bool { return origin(u) == s.origin }

// Decorate sets req's user agent and, when req goes to the scope's origin,
// the extra headers and the credentials; on a request elsewhere it removes
// them.
func (s *RequestScope) Decorate(req *http.Request) { s.decorate(req, s.SameOrigin(req.URL)) }

// decorate is Decorate with the origin's verdict given (a range read
// decides it once for its URL).
func (s *RequestScope) decorate(req *http.Request, sameOrigin bool) {
	if !sameOrigin {
		// Go's client copies the first request's headers onto a redirect
		// and strips only Authorization and cookies, and only for another
		// host name (another port is the same host to it).
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

// CheckRedirect is an http.Client's CheckRedirect under the scope's rule.
func (s *RequestScope) CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects: %w", maxRedirects, errdefs.ErrSourceRefused)
	}
	req.Header.Del("Referer")
	same := s.SameOrigin(req.URL)
	if !same && s.Scoped() {
		s.log.Info("redirected to another origin, not sending credentials or extra headers",
			"from", s.redacted, "to", redactURL(req.URL), "dropped_headers", slices.Sorted(maps.Keys(s.headers)))
	}
	s.decorate(req, same)
	return nil
}
