package datasource

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// The causes a retry's words are told by, wrapped into the errors of a
// broken transfer (their text is the errors' own words).
var (
	// errNoData: the stall watchdog ended a request.
	errNoData = errors.New("no data received")
	// errDropped: the connection ended before the body did.
	errDropped = errors.New("connection closed")
)

// retryFailure says in a person's words what failed, naming where, for a
// retry's notice (retry.Notice.Failure): "Connection to example.com
// dropped", "example.com answered 503 Service Unavailable". stall is the
// source's stall timeout, named when it ended the request.
func retryFailure(where string, err error, stall time.Duration) string {
	var status *errdefs.HTTPStatusError
	var dns *net.DNSError
	var nerr net.Error
	switch {
	case errors.As(err, &status):
		text := status.Status
		if text == "" {
			text = strconv.Itoa(status.StatusCode)
		}
		return where + " answered " + text
	case errors.Is(err, errNoData):
		return where + " sent nothing for " + stall.String()
	case errors.Is(err, syscall.ECONNREFUSED):
		return where + " refused the connection"
	case errors.Is(err, errDropped), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF):
		return "Connection to " + where + " dropped"
	case errors.As(err, &dns):
		return "Looking up " + dns.Name + " failed"
	case errors.As(err, &nerr) && nerr.Timeout():
		return "Connection to " + where + " timed out"
	}
	return "Reading from " + where + " failed (" + innermost(err).Error() + ")"
}

// innermost is the last error of err's chain (its first branch).
func innermost(err error) error {
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[0]
			}
		}
		if next == nil {
			return err
		}
		err = next
	}
}
