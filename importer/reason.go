package importer

import (
	"errors"

	"github.com/diskimport/engine/errdefs"
)

// reasons name the engine's sentinels in the result's "reason" field: one
// stable word each, for scripts that branch on the kind of failure
// without parsing the message; the CLI's JSON and CDI's termination
// message carry it. The first match wins (a checksum mismatch stays one
// whatever wraps it); the finer sentinels of one class come before the
// class's broader ones.
var reasons = []struct {
	err  error
	word string
}{
	{errdefs.ErrChecksumMismatch, "ChecksumMismatch"},
	{errdefs.ErrInvalidOptions, "InvalidOptions"},
	{errdefs.ErrToolMissing, "ToolMissing"},
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

// Reason returns the stable word naming err's kind ("" for nil), the
// "reason" of the command line's JSON. A cancelled import that failed for
// a reason of its own (a timeout while a refused connection was being
// retried) is named by that reason.
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
