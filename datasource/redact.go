package datasource

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces what a rendered URL must not show.
const redacted = "REDACTED"

// RedactURL renders an endpoint or URL for a log line, an error or a
// result: the user info is replaced and every query value too (the names
// stay), and a fragment is dropped. Every value goes, not only the
// secret-looking ones: a pre-signed URL's credentials are query values under
// names that vary by service (X-Amz-Signature and X-Amz-Credential,
// X-Goog-Signature, Azure's sig, CloudFront's Signature and Key-Pair-Id, a
// plain token or hmac). Text that does not parse as a URL is cut the same
// way by position. It is the one rendering of a URL every source and the
// CDI contract use.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		return redactURL(u)
	}
	s := raw
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i] + "?" + redacted
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		// scheme:opaque (or no scheme at all): nothing after the first
		// colon is shown, it may be user:password@host.
		if i := strings.IndexByte(s, ':'); i >= 0 {
			return s[:i+1] + redacted
		}
		return s
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = redacted + "@" + authority[at+1:]
	}
	if hasPath {
		return scheme + "://" + authority + "/" + path
	}
	return scheme + "://" + authority
}

// redactURL is RedactURL of a parsed URL.
func redactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User(redacted)
	}
	c.Fragment, c.RawFragment = "", ""
	c.ForceQuery = false
	if c.RawQuery != "" {
		parts := strings.Split(c.RawQuery, "&")
		for i, p := range parts {
			// A part without '=' may be a bare token: it goes too.
			if k, v, ok := strings.Cut(p, "="); !ok {
				parts[i] = redacted
			} else if v != "" {
				parts[i] = k + "=" + redacted
			}
		}
		c.RawQuery = strings.Join(parts, "&")
	}
	return c.String()
}

// urlInText finds the URLs in a message: a scheme, "://" and what follows
// up to a space, a quote or an angle bracket (how Go and containers/image
// quote them).
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// redactedError is an error of a library with every URL in its message
// rendered by RedactURL: net/http's url.Error, and containers/image's errors
// with it, quote the URL requested, the pre-signed URL a registry redirected
// a blob to included. errors.Is and errors.As still see the error.
type redactedError struct{ err error }

func (e *redactedError) Error() string {
	return urlInText.ReplaceAllStringFunc(e.err.Error(), RedactURL)
}
func (e *redactedError) Unwrap() error { return e.err }

// redactErrorURLs wraps err (nil stays nil) so its message shows no URL's
// user info or query values.
func redactErrorURLs(err error) error {
	if err == nil {
		return nil
	}
	return &redactedError{err: err}
}
