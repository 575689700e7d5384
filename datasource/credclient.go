package datasource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// credentialRequestTimeout bounds one request of a credential provider (an
// STS exchange, a token endpoint, a metadata server): they answer in
// milliseconds, and a stuck one must not hold an import for the stall
// timeout.
const credentialRequestTimeout = 30 * time.Second

// credentialClient is the HTTP client of the credential providers (STS,
// OAuth2 token endpoints, the container credentials endpoint, the instance
// metadata service), apart from the import's own transport:
//
//   - it follows no redirect: a 3xx is the answer, so a token, a key or a
//     metadata header never goes anywhere but the endpoint it is for;
//   - it carries the egress policy of c like every other request, except
//     that the addresses in endpoints (the literal addresses of the
//     credential endpoints the pod's environment names, such as EKS Pod
//     Identity's 169.254.170.23, or 169.254.169.254 when the metadata
//     service is allowed for credentials) may be reached by these requests,
//     directly and never through a proxy. The import's data requests and
//     their redirects use the source's own transport, where those addresses
//     stay denied;
//   - each request records its answer's status and its transport error in
//     the context's credentialAttempt, so that a provider's flattened error
//     can still be classified (a refusal, a failure that may pass, an
//     egress refusal).
//
// A caller's Config.Transport, when set, carries these requests too (it
// applies its own policy).
func credentialClient(c Config, endpoints []netip.Addr) (*http.Client, error) {
	var base http.RoundTripper = c.Transport
	if base == nil {
		tr, err := NewTransport(c)
		if err != nil {
			return nil, err
		}
		if c.Egress != nil && len(endpoints) > 0 {
			exempt := func(host string) bool {
				a, err := netip.ParseAddr(strings.Trim(host, "[]"))
				return err == nil && slices.Contains(endpoints, a.Unmap().WithZone(""))
			}
			dial := tr.DialContext
			d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
			if c.Egress.Dialer != nil {
				cp := *c.Egress.Dialer
				d = &cp
			}
			tr.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
				if host, _, err := net.SplitHostPort(address); err == nil && exempt(host) {
					return d.DialContext(ctx, network, address)
				}
				return dial(ctx, network, address)
			}
			proxy := tr.Proxy
			tr.Proxy = func(r *http.Request) (*url.URL, error) {
				if exempt(r.URL.Hostname()) {
					return nil, nil
				}
				return proxy(r)
			}
		}
		base = tr
	}
	ua := c.UserAgent
	if ua == "" {
		ua = defaultUserAgent
	}
	return &http.Client{
		Transport:     &recordingTransport{base: base, ua: ua},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       credentialRequestTimeout,
	}, nil
}

// credentialEndpointAddr is the literal address of an endpoint URL's host,
// if it is one.
func credentialEndpointAddr(raw string) (netip.Addr, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// credentialAttempt is what the requests of one credential retrieval
// answered: the last status and the last transport error.
type credentialAttempt struct {
	mu     sync.Mutex
	status int
	err    error
}

type credentialAttemptKey struct{}

// withCredentialAttempt returns a context whose credential requests record
// into a.
func withCredentialAttempt(ctx context.Context, a *credentialAttempt) context.Context {
	return context.WithValue(ctx, credentialAttemptKey{}, a)
}

// recordingTransport sets the user agent and records each answer in the
// request context's credentialAttempt.
type recordingTransport struct {
	base http.RoundTripper
	ua   string
}

func (t *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Header.Get("User-Agent") == "" || strings.HasPrefix(r.Header.Get("User-Agent"), "Go-http-client") {
		r.Header.Set("User-Agent", t.ua)
	}
	resp, err := t.base.RoundTrip(r)
	if a, ok := r.Context().Value(credentialAttemptKey{}).(*credentialAttempt); ok {
		a.mu.Lock()
		a.err = err
		if resp != nil {
			a.status = resp.StatusCode
		}
		a.mu.Unlock()
	}
	return resp, err
}

// classify turns a provider's failed retrieval into the error an import
// reports: an egress refusal as it is; a redirect or a 4xx as a refusal
// (never retried), with detail (the provider's message, secrets removed);
// 5xx, 429 and transport failures as ErrSourceUnreachable (retried by the
// source); anything else (an answer that is no credentials) as a refusal.
// what names the flow the user-facing way ("S3 web identity credentials
// from STS https://sts…"), endpoint the URL asked (redacted).
func (a *credentialAttempt) classify(what, endpoint string, err error) error {
	a.mu.Lock()
	status, terr := a.status, a.err
	a.mu.Unlock()
	detail := scrubTokens(redactErrorURLs(err).Error())
	var egress *errdefs.EgressError
	switch {
	case errors.As(terr, &egress):
		return fmt.Errorf("%s: %w", what, egress)
	case terr != nil:
		return fmt.Errorf("%s: %w: %s", what, errdefs.ErrSourceUnreachable, scrubTokens(redactErrorURLs(terr).Error()))
	case status >= 300 && status < 400:
		return fmt.Errorf("%s: the endpoint redirected, and a credential request is not sent elsewhere: %w",
			what, &errdefs.HTTPStatusError{URL: endpoint, StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status))})
	case retryableStatus(status):
		return fmt.Errorf("%s: %d %s (%s): %w", what, status, http.StatusText(status), detail, errdefs.ErrSourceUnreachable)
	case status >= 400:
		return fmt.Errorf("%s refused: %s: %w", what, detail,
			&errdefs.HTTPStatusError{URL: endpoint, StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status))})
	}
	return fmt.Errorf("%s: %s: %w", what, detail, errdefs.ErrSourceRefused)
}

// jwtRe matches a JSON Web Token (three base64url parts, the first a JSON
// object: "eyJ"), as an identity provider's or an STS's message might quote
// one back.
var jwtRe = regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*`)

// scrubTokens removes the JSON Web Tokens a message quotes.
func scrubTokens(s string) string { return jwtRe.ReplaceAllString(s, "[token]") }
