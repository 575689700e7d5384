package datasource

import (
	"log/slog"
	"net/url"
	"sync/atomic"
)

// credentialScope is what an object store's signing or token layer asks
// before it adds credentials to a request: they belong to the origin
// (scheme, host, port) of the object's endpoint, the unit the HTTP source
// scopes basic auth and extra headers to. A request elsewhere (a redirect,
// or a range read of a redirected URL) goes without them, as AWS's SDKs
// follow a redirect to a pre-signed object unsigned.
type credentialScope struct {
	origin string
	what   string // "a signature", "the access token", for the log
	log    *slog.Logger
	logged atomic.Bool // the first request elsewhere is logged, not every range read
}

func newCredentialScope(u *url.URL, what string, log *slog.Logger) *credentialScope {
	return &credentialScope{origin: origin(u), what: what, log: log}
}

// sameOrigin reports whether u is at the endpoint's origin.
func (c *credentialScope) sameOrigin(u *url.URL) bool { return origin(u) == c.origin }

// allows reports whether a request to u may carry the credentials, and
// logs the first one that may not.
func (c *credentialScope) allows(u *url.URL) bool {
	if c.sameOrigin(u) {
		return true
	}
	if !c.logged.Swap(true) {
		c.log.Info("redirected to another origin, sending the request without "+c.what,
			"from", c.origin, "to", redactURL(u))
	}
	return false
}
