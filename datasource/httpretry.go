package datasource

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/diskimport/engine/errdefs"
)

const (
	defaultRetries         = 10
	defaultRetryBackoff    = time.Second
	defaultRetryMaxElapsed = 5 * time.Minute
	maxRetryBackoff        = 30 * time.Second
	maxRetryAfter          = time.Minute
)

// ErrRestart matches a *RestartError: the transfer broke off and cannot be
// resumed where it stopped, so whoever consumes the stream must discard
// what it made of the bytes so far and read the source again from Open.
var ErrRestart = errors.New("transfer must start over")

// RestartError says why a broken transfer cannot resume: the server ignored
// the Range request, or the object changed since the first response (its
// ETag or Last-Modified differs), or it offers no validator that would let
// us tell. Continuing would splice two different objects, so the only safe
// way on is a fresh Open. It matches ErrRestart and ErrSourceUnreachable
// (for callers that do not restart).
type RestartError struct {
	URL    string
	Offset int64 // bytes already delivered when the resume failed
	Reason string
}

func (e *RestartError) Error() string {
	return fmt.Sprintf("GET %s: cannot resume at byte %d: %s; the transfer must start over", e.URL, e.Offset, e.Reason)
}

// Is makes errors.Is match ErrRestart and ErrSourceUnreachable.
func (e *RestartError) Is(target error) bool {
	return target == ErrRestart || target == errdefs.ErrSourceUnreachable
}

// Retries returns how many times src re-sent a request after a failure
// (reconnects, resumes, retried statuses) over its life, or 0 for sources
// that never retry.
func Retries(src Source) int {
	if r, ok := src.(interface{ Retries() int }); ok {
		return r.Retries()
	}
	return 0
}

// retryPolicy is the resolved retry configuration of a source.
type retryPolicy struct {
	max        int // < 0: never retry
	backoff    time.Duration
	maxElapsed time.Duration
}

func newRetryPolicy(o HTTPOptions) retryPolicy {
	p := retryPolicy{max: o.Retries, backoff: o.RetryBackoff, maxElapsed: o.RetryMaxElapsed}
	if p.max == 0 {
		p.max = defaultRetries
	}
	if p.backoff <= 0 {
		p.backoff = defaultRetryBackoff
	}
	if p.maxElapsed <= 0 {
		p.maxElapsed = defaultRetryMaxElapsed
	}
	return p
}

// retryableStatus: server trouble that may pass. Everything else non-2xx
// (401, 403, 404, 410, ...) is the server's final word.
func retryableStatus(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// permanentTransportError: failures a retry cannot fix.
func permanentTransportError(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.Is(err, errdefs.ErrSourceRefused) || errors.Is(err, errdefs.ErrInvalidOptions) ||
		errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}

// retryAfter reads a Retry-After in seconds, capped; 0 when absent.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s <= 0 {
		return 0
	}
	return min(time.Duration(s)*time.Second, maxRetryAfter)
}

// retryState is one stream's failure streak: consecutive failures with no
// byte delivered in between. Backoff and the elapsed-time bound apply to a
// streak; the retry count is the source's, across every stream it opens.
type retryState struct {
	streakStart time.Time
	delay       time.Duration
}

// wait decides whether another try is allowed after cause and sleeps the
// jittered backoff. It returns nil to go on, or the error to give up with.
func (b *httpBody) wait(cause error, hint time.Duration) error {
	s := b.src
	p := s.retry
	now := time.Now()
	if b.rs.streakStart.IsZero() {
		b.rs.streakStart = now
		b.rs.delay = p.backoff
	}
	done := int(s.retries.Load())
	if p.max < 0 {
		return cause
	}
	if done >= p.max {
		return fmt.Errorf("%w (gave up after %d retries)", cause, done)
	}
	// Full jitter in [delay/2, delay): many importers hitting one server
	// after an outage should not come back in lockstep.
	d := b.rs.delay/2 + rand.N(b.rs.delay/2+1)
	d = max(d, hint)
	if elapsed := now.Sub(b.rs.streakStart); elapsed+d > p.maxElapsed {
		return fmt.Errorf("%w (gave up after retrying for %s)", cause, elapsed.Round(time.Millisecond))
	}
	b.rs.delay = min(b.rs.delay*2, maxRetryBackoff)
	n := s.retries.Add(1)
	s.log.Warn("HTTP transfer failed, retrying", "url", s.redacted, "retry", n, "maxRetries", p.max,
		"delay", d.Round(time.Millisecond), "offset", b.got, "cause", cause.Error())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-b.life.Done():
		if perr := b.parent.Err(); perr != nil {
			return cancelError(s.redacted, perr)
		}
		return errBodyClosed
	}
}

// progressed ends the failure streak: bytes are flowing again.
func (b *httpBody) progressed() { b.rs.streakStart = time.Time{} }
