package datasource

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/retry"
)

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
		errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) ||
		answersWithoutTLS(err) // a plain-HTTP server: another try answers the same
}

// answersWithoutTLS tells an https:// request answered by a server that
// does not speak TLS: Go's transport says "server gave HTTP response to
// HTTPS client" (an untyped error) when the answer looks like HTTP, else
// returns the tls.RecordHeaderError.
func answersWithoutTLS(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// retryAfter is the response's Retry-After hint; 0 when absent.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	return retry.RetryAfter(resp.Header.Get("Retry-After"), time.Now())
}

// wait applies the source's retry policy to cause (the retry count is the
// source's, the backoff this stream's) and sleeps. It returns nil to go on,
// or the error to give up with.
func (b *httpBody) wait(cause error, hint time.Duration) error {
	err := b.streak.Wait(b.life, cause, hint)
	if err != nil && b.life.Err() != nil {
		// Ended by the caller's context or by Close.
		if perr := b.parent.Err(); perr != nil {
			return &errdefs.CancelledError{What: "reading " + b.src.redacted, Context: perr, Last: cause}
		}
		return errdefs.ErrClosed
	}
	return err
}

// progressed ends the failure streak: bytes are flowing again.
func (b *httpBody) progressed() { b.streak.Reset() }

// newStreak paces the failures of one stream, logging each retry.
func (b *httpBody) newStreak() *retry.Streak {
	s := b.src
	return s.budget.Streak(func(a retry.Attempt) {
		s.log.Warn("HTTP transfer failed, retrying", s.retryNotice(a, b.got).Attr())
	})
}

// retryNotice is a retry of s's at offset, for its log record.
func (s *httpSource) retryNotice(a retry.Attempt, offset int64) retry.Notice {
	return retry.Notice{Attempt: a, Offset: offset, Failure: retryFailure(s.url.Host, a.Cause, s.stall),
		Context: []slog.Attr{slog.String("url", s.redacted)}}
}
