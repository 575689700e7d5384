package cdi

import (
	"errors"

	"github.com/diskimport/engine/errdefs"
)

// reasons name the engine's sentinels in the result's "reason" field: one
// stable word each, for scripts that branch on the kind of failure
// without parsing the message. The order follows Classify's (the first
// match wins, so a checksum mismatch stays one whatever wraps it); the
// finer sentinels of one class come before the class's broader ones.
var reasons = []struct {
	err  error
	word string
}{
	{errdefs.ErrChecksumMismatch, "ChecksumMismatch"},
	{errdefs.ErrInvalidOptions, "InvalidOptions"},
	{errdefs.ErrUnsafeImage, "UnsafeImage"},
	{errdefs.ErrCompressedFile, "UnsupportedCompression"},
	{errdefs.ErrArchiveFile, "ArchiveNotImage"},
	{errdefs.ErrNoDiskInArchive, "NoDiskInArchive"},
	{errdefs.ErrSeveralDisksInArchive, "SeveralDisksInArchive"},
	{errdefs.ErrTextNotImage, "TextNotImage"},
	{errdefs.ErrUnsupportedFormat, "UnsupportedFormat"},
	{errdefs.ErrInvalidImage, "InvalidImage"},
	{errdefs.ErrScratchSpaceRequired, "ScratchSpaceRequired"},
	{errdefs.ErrTargetTooSmall, "TargetTooSmall"},
	{errdefs.ErrEgressDenied, "EgressDenied"},
	{errdefs.ErrSourceRefused, "SourceRefused"},
	{errdefs.ErrSourceUnreachable, "SourceUnreachable"},
	{errdefs.ErrTargetBusy, "TargetBusy"},
	{errdefs.ErrVerifyMismatch, "VerifyMismatch"},
	{errdefs.ErrDeadlinePassed, "DeadlinePassed"},
	{errdefs.ErrClientNotAuthorized, "ClientNotAuthorized"},
	{errdefs.ErrCancelled, "Cancelled"},
}

// ReasonFailed is the reason of an error that wraps none of the sentinels.
const ReasonFailed = "Failed"

// Reason returns the stable word naming err's kind ("" for nil). A
// cancelled import that failed for a reason of its own (a signal while a
// refused download was being retried) is named by that reason, as
// Classify does.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.word
		}
	}
	return ReasonFailed
}

// HTTPStatus is the status code of the HTTP answer that failed the import,
// or 0 when no HTTP status is involved.
func HTTPStatus(err error) int {
	var se *errdefs.HTTPStatusError
	if errors.As(err, &se) {
		return se.StatusCode
	}
	return 0
}
