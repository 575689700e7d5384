package datasource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/cpulimit"
	"github.com/diskimport/engine/internal/ctxio"
	"github.com/diskimport/engine/internal/retry"
)

const (
	defaultStallTimeout = 5 * time.Minute
	defaultUserAgent    = "diskimport-engine"
	maxRedirects        = 10
)

type httpSource struct {
	url      *url.URL // user info removed; credentials live in the scope
	redacted string
	origin   string
	// scope adds the user agent, the extra headers and the credentials
	// to each request, and decides what a redirect carries.
	scope  *RequestScope
	stall  time.Duration
	log    *slog.Logger
	client *http.Client
	// plain: the object is fetchable without anything but the URL (no
	// credentials, extra headers or private CA), so another client may read
	// it too.
	plain    bool
	insecure bool
	budget   *retry.Budget // retries so far, across every Open
	// noConnectRetry: Config.NoConnectRetry; answered is set once any
	// response arrived.
	noConnectRetry bool
	answered       atomic.Bool
	// connections and chunk: Config.Connections and Config.ChunkSize (0:
	// decided at Open by rangeConnections and rangeChunkSize).
	connections int
	chunk       int64
	// cores is the CPU the process may use (cpulimit.Cores), read when
	// the count of connections is not asked.
	cores float64
	// rangesUnverifiable, once set, says why a range answer carried no
	// validator to check against the pin: later Opens of this source read
	// over one connection.
	rangesUnverifiable atomic.Pointer[string]
}

// NewHTTP builds a source that fetches rawURL (http or https) with one GET
// per Open. Malformed options (URL, headers, certificate directory) fail
// here rather than at Open.
func NewHTTP(rawURL string, o Config) (Source, error) {
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
		stall:  o.StallTimeout,
		log:    o.logger(),
		budget: retry.NewBudget(o.retryPolicy(nil)),
	}
	user, pass := o.Username, o.Password
	if u.User != nil {
		if user == "" && pass == "" {
			user = u.User.Username()
			pass, _ = u.User.Password()
		}
		// Dropped from the URL so only our redirect policy decides where
		// credentials go.
		u.User = nil
	}
	s.url = u
	s.redacted = redactURL(u)
	s.origin = origin(u)
	if s.stall <= 0 {
		s.stall = defaultStallTimeout
	}
	headers, err := ParseHeaders(o.Headers)
	if err != nil {
		return nil, err
	}
	s.scope = NewRequestScope(u, headers, user, pass, o.UserAgent, s.log)
	tr := o.Transport
	if tr == nil {
		if tr, err = s.transport(o); err != nil {
			return nil, err
		}
	}
	s.client = &http.Client{Transport: tr, CheckRedirect: s.checkRedirect}
	// A caller's transport may add what the URL alone does not carry.
	s.plain = !s.scope.Scoped() && o.CertDir == "" && o.Transport == nil
	s.insecure = o.InsecureTLS
	s.noConnectRetry = o.NoConnectRetry
	if s.connections, s.chunk, err = o.parallel(); err != nil {
		return nil, err
	}
	if s.connections == 0 {
		s.cores = cpulimit.Cores()
	}
	return s, nil
}

// transport builds the source's own transport from o.
func (s *httpSource) transport(o Config) (*http.Transport, error) {
	tr, err := NewTransport(o)
	if err != nil {
		return nil, err
	}
	// One GET per import: no idle connection (and its goroutines) should
	// outlive the stream that used it.
	tr.DisableKeepAlives = true
	return tr, nil
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

// decorate is the scope's rule for a request of the source (the first
// request, a redirect, or a range read) whose origin's verdict is known.
func (s *httpSource) decorate(req *http.Request, sameOrigin bool) { s.scope.decorate(req, sameOrigin) }

// checkRedirect is the scope's redirect rule.
func (s *httpSource) checkRedirect(req *http.Request, via []*http.Request) error {
	return s.scope.CheckRedirect(req, via)
}

// Open sends the GET, retrying what may pass (connection errors, stalls,
// 5xx, 429). The stall watchdog already runs while waiting for the response
// headers.
func (s *httpSource) Open(ctx context.Context) (*Transfer, error) {
	life, kill := context.WithCancelCause(ctx)
	b := &httpBody{src: s, parent: ctx, life: life, kill: kill, size: -1}
	b.streak = b.newStreak()
	if err := b.connect(); err != nil {
		kill(nil)
		return nil, err
	}
	resp := b.cur.resp
	s.log.Debug("HTTP source answered", "url", s.redacted, "status", resp.Status, "content_length", resp.ContentLength,
		"etag", resp.Header.Get("ETag"), "last_modified", resp.Header.Get("Last-Modified"), "accept_ranges", resp.Header.Get("Accept-Ranges"))
	b.size = resp.ContentLength
	b.pin = pinOf(resp.Header)
	st := &Transfer{Body: b, Size: b.size, ContentType: resp.Header.Get("Content-Type"), Capabilities: Capabilities{HTTPAnswer: true}}
	// The object may be read in place, and over several connections, when
	// the server serves ranges of an object of known size that it pins to
	// one version: every range's answer is checked against the pin, so
	// without one a range could come from another version unseen.
	if b.size > 0 && strings.EqualFold(resp.Header.Get("Accept-Ranges"), "bytes") {
		if why := s.whyNoRanges(b.pin); why != "" {
			s.log.Info("reading the object over one connection, not over byte ranges", "url", s.redacted, "reason", why)
		} else {
			b.ranged = &RangedURL{URL: resp.Request.URL.String(), InsecureTLS: s.insecure, Plain: s.plain,
				Size: b.size, src: s, pin: b.pin}
			st.Ranges = b.ranged
			link := linkFacts{loopback: isLoopbackHost(resp.Request.URL.Hostname()), wait: b.cur.wait}
			conns, why := rangeConnections(s.connections, s.cores, link)
			chunk := rangeChunkSize(s.chunk, link)
			s.log.Debug("range connections decided", "url", s.redacted, "connections", conns, "chunkSize", chunk, "reason", why,
				"cores", s.cores, "loopback", link.loopback, "first_answer_wait", link.wait)
			if conns > 1 && b.size > chunk {
				st.Body, st.ReadAhead = newParallelBody(ctx, b, s, conns, chunk), true
			}
		}
	}
	return st, nil
}

// whyNoRanges says why an object pinned by pin may not be read over
// ranges, or "" when it may.
func (s *httpSource) whyNoRanges(pin objectPin) string {
	if !pin.pinned() {
		_, why := pin.check(nil)
		return why
	}
	if why := s.rangesUnverifiable.Load(); why != nil {
		return "an earlier range answer could not be checked against the object: " + *why
	}
	return ""
}

// Retries reports how many requests were re-sent after a failure.
func (s *httpSource) Retries() int { return s.budget.Used() }

// requestError classifies a failed client.Do: caller cancellation, stall,
// refusal from the redirect policy, or an unreachable server.
func (s *httpSource) requestError(parent, reqCtx context.Context, err error) error {
	if perr := parent.Err(); perr != nil {
		return ctxio.Cancelled("reading "+s.redacted, perr)
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
	if answersWithoutTLS(err) {
		return errdefs.Markf(errdefs.ErrSourceUnreachable, "GET %s: %w (the server does not answer in TLS: is it http://, not https://?)", s.redacted, err)
	}
	return errdefs.Markf(errdefs.ErrSourceUnreachable, "GET %s: %w", s.redacted, err)
}
