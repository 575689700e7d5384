// Package errdefs holds the error values every layer of the engine returns
// and callers branch on with errors.Is / errors.As. It is for programs that
// act on why an import failed (retry, report, ask for a larger volume) and
// for a custom source's errors (package datasource). It is a leaf package so
// that sources, the qemu wrapper, targets and the public importer package can
// all share one set of sentinels; the importer package re-exports them.
package errdefs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/diskimport/engine/internal/units"
)

var (
	// ErrTargetTooSmall: the image (or the stream written so far) does not fit
	// the target device, file size limit or free space.
	ErrTargetTooSmall = errors.New("target too small")
	// ErrInvalidImage: the image is damaged, truncated, or not what its
	// header claims.
	ErrInvalidImage = errors.New("invalid image")
	// ErrUnsafeImage: the image would make qemu-img read other files or
	// hosts (backing files, external data files, vmdk extent files) or asks
	// for absurd resources.
	ErrUnsafeImage = errors.New("unsafe image")
	// ErrUnsupportedFormat: a format outside the allow-list.
	ErrUnsupportedFormat = errors.New("unsupported image format")
	// ErrChecksumMismatch: the bytes received do not match the expected
	// digest. The text "checksum mismatch" is what CDI's controller matches.
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrSourceUnreachable: the source could not be contacted or the
	// transfer broke off (connection refused, DNS, TLS, stall, short body).
	ErrSourceUnreachable = errors.New("source unreachable")
	// ErrSourceRefused: the source answered but refused to serve the image
	// (a non-2xx HTTP status, for example).
	ErrSourceRefused = errors.New("source refused the request")
	// ErrCancelled: the import was stopped by its context.
	ErrCancelled = errors.New("import cancelled")
	// ErrTargetBusy: the target block device is mounted or held open.
	ErrTargetBusy = errors.New("target busy")
	// ErrScratchSpaceRequired: the image needs scratch space and none is
	// usable.
	ErrScratchSpaceRequired = errors.New("scratch space required and none found")
	// ErrInvalidOptions: the caller's options are inconsistent or malformed.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrRestart: a transfer broke off and cannot resume where it stopped
	// (the server ignored the range, or the object changed), so whoever
	// consumes the stream must discard what it made of the bytes so far and
	// read the source again from the start.
	ErrRestart = errors.New("transfer must start over")
	// ErrClosed: a read on a source stream after its Close.
	ErrClosed = errors.New("read on a closed source stream")
	// ErrVerifyMismatch: the target read back after the copy differs from
	// the source (returned wrapped in a *VerifyError).
	ErrVerifyMismatch = errors.New("verification failed: target differs from source")
	// ErrNotStreamable: a streaming decoder met a layout it does not handle
	// in one forward pass (tables after the data beyond its buffer, a
	// cluster used twice, an unknown feature): the image itself may be
	// fine, and the caller falls back to scratch + qemu-img.
	ErrNotStreamable = errors.New("image layout not streamable")
	// ErrNoDeltaBase: a delta clone's target is no base for the source
	// (another size, unreadable, not the base digest named): the caller
	// clones in full instead.
	ErrNoDeltaBase = errors.New("the target is no base for a delta clone")
	// ErrTablesTooLarge: an image's tables are larger than the caller
	// reads up front (format.ReadQCOW2Layout's bound); nothing is wrong
	// with the image.
	ErrTablesTooLarge = errors.New("image tables too large to read up front")
	// ErrToolMissing: a program the import needs (qemu-img) is not
	// installed: a setup error, not a verdict on the image.
	ErrToolMissing = errors.New("a program the import needs is not installed")
)

// HTTPStatusError is returned when an HTTP source answers with a non-2xx
// status. It matches ErrSourceRefused with errors.Is.
type HTTPStatusError struct {
	URL        string
	StatusCode int
	Status     string // e.g. "404 Not Found"
}

func (e *HTTPStatusError) Error() string {
	status := e.Status
	if status == "" {
		status = strconv.Itoa(e.StatusCode)
		if text := http.StatusText(e.StatusCode); text != "" {
			status += " " + text
		}
	}
	return fmt.Sprintf("the server answered %s for %s", status, e.URL)
}

// Is makes errors.Is(err, ErrSourceRefused) true for HTTP status errors.
func (e *HTTPStatusError) Is(target error) bool { return target == ErrSourceRefused }

// SizeError reports an image that does not fit its target and carries both
// sizes so the message states them. It matches ErrTargetTooSmall.
type SizeError struct {
	ImageSize  int64 // virtual size of the image, or bytes seen so far
	TargetSize int64 // capacity of the target
	// What names ImageSize ("virtual image size", "source size", "image
	// data", "requested size"…); the engine always sets it.
	What string
	// FreeSpace: TargetSize is the free space of a file target's
	// filesystem (neither a requested size nor a device's size), which a
	// sparse image may pass when its data fit (AllowSparseOvercommit).
	FreeSpace bool
}

// VirtualImageSize is SizeError.What for an image's virtual size.
const VirtualImageSize = "virtual image size"

func (e *SizeError) Error() string {
	what := e.What
	if what == "" {
		what = VirtualImageSize
	}
	sizes := fmt.Sprintf("%s for %s, %d bytes short", units.Bytes(e.ImageSize), units.Bytes(e.TargetSize), e.ImageSize-e.TargetSize)
	if what == "image data" { // a stream of unknown length, cut where it passed the end
		sizes = "more than " + units.Bytes(e.TargetSize) + " for " + units.Bytes(e.TargetSize)
	}
	return fmt.Sprintf("%s %d is larger than the reported available storage %d (%s): a larger volume is required",
		what, e.ImageSize, e.TargetSize, sizes)
}

// Is makes errors.Is(err, ErrTargetTooSmall) true.
func (e *SizeError) Is(target error) bool { return target == ErrTargetTooSmall }

// VerifyError states what was compared when verification failed. It
// matches ErrVerifyMismatch.
type VerifyError struct {
	Method       string // "sha256" or "qemu-img compare"
	Bytes        int64
	SourceDigest string
	TargetDigest string
	Detail       string
}

func (e *VerifyError) Error() string {
	if e.Method == "sha256" {
		return fmt.Sprintf("%v: the first %d bytes of the source hash to %s but the target's to %s", ErrVerifyMismatch, e.Bytes, e.SourceDigest, e.TargetDigest)
	}
	return fmt.Sprintf("%v: %s: %s", ErrVerifyMismatch, e.Method, e.Detail)
}

// Is makes errors.Is(err, ErrVerifyMismatch) true.
func (e *VerifyError) Is(target error) bool { return target == ErrVerifyMismatch }

// Mark returns err matching kind with errors.Is while its text stays err's
// own: the kind is for programs, the words for people, and "GET url:
// connection refused" needs no ": source unreachable" in the middle.
func Mark(kind, err error) error {
	if err == nil {
		return nil
	}
	return &markedError{kind: kind, err: err}
}

// Markf is Mark(kind, fmt.Errorf(format, args...)).
func Markf(kind error, format string, args ...any) error {
	return Mark(kind, fmt.Errorf(format, args...))
}

type markedError struct{ kind, err error }

func (e *markedError) Error() string   { return e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.kind, e.err} }

// CancelledError: work stopped because its context ended. It matches
// ErrCancelled and the context's error (context.Canceled or
// context.DeadlineExceeded), and reads "WHAT cancelled" or "WHAT timed
// out". Last is the failure being retried when the context ended (the
// connection refused behind a timeout): kept in the text and the chain.
type CancelledError struct {
	What    string
	Context error
	Last    error
	// Detail is what the stopped work returned (a killed child's exit, a
	// read cut short): in the chain for errors.Is and errors.As, never
	// in the text, since it only restates the cancellation.
	Detail error
}

func (e *CancelledError) Error() string {
	s := "cancelled"
	if errors.Is(e.Context, context.DeadlineExceeded) {
		s = "timed out"
	}
	if e.What != "" {
		s = e.What + " " + s
	}
	if e.Last != nil {
		s += " while retrying after: " + e.Last.Error()
	}
	return s
}

func (e *CancelledError) Unwrap() []error {
	errs := []error{ErrCancelled, e.Context}
	for _, err := range []error{e.Last, e.Detail} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
