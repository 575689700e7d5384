// Package errtable is the one table of what an import's error means: each
// sentinel of package errdefs, the stable word the result's "reason" names
// it by (importer.Reason: the command line's JSON, CDI's termination
// message) and the class CDI's roles act on (cdi.Classify: exit codes,
// scratch space). Both read the table below; neither lists sentinels.
package errtable

import (
	"errors"

	"github.com/diskimport/engine/errdefs"
)

// Class is what an import's error means to whoever reads its outcome: the
// CDI contract's exit codes, the upload server's answers. Each consumer
// maps a Class, so the engine's errors are read in one place.
type Class int

const (
	// Succeeded: no error.
	Succeeded Class = iota
	// ChecksumMismatch: the bytes received are not the ones expected.
	// Retrying cannot help, which is why CDI's contract exits 0 for it.
	ChecksumMismatch
	// InvalidOptions: the caller's flags or environment are wrong.
	InvalidOptions
	// BadImage: the image is damaged, unsafe or of a format we refuse.
	BadImage
	// ScratchSpaceRequired: the image needs scratch space and none is usable.
	ScratchSpaceRequired
	// TargetTooSmall: the image does not fit the volume.
	TargetTooSmall
	// SourceFailed: the source could not be reached or refused the image.
	SourceFailed
	// TargetBusy: the block device is mounted or held open.
	TargetBusy
	// Cancelled: the import was stopped (a signal, a client that left).
	Cancelled
	// Failed: any other error.
	Failed
)

// Row is one sentinel's meaning. Reason "" is a sentinel that is an
// engine's signal (start over, take another route), not a kind of failure
// of its own: an error that carries it is named by what else it wraps.
// Class Failed is a sentinel CDI's roles have no class for: it does not
// decide the class, a later row's sentinel may.
type Row struct {
	Err    error
	Reason string
	Class  Class
}

// Rows are the table, in the order an error is read: the first row whose
// sentinel the error wraps gives its reason (a checksum mismatch stays one
// whatever wraps it), the first such row with a class its class; the finer
// sentinels of one class come before the class's broader ones. Every
// sentinel of errdefs has its row (TestEverySentinelHasARow).
func Rows() []Row {
	return []Row{
		{errdefs.ErrChecksumMismatch, "ChecksumMismatch", ChecksumMismatch},
		{errdefs.ErrInvalidOptions, "InvalidOptions", InvalidOptions},
		{errdefs.ErrToolMissing, "ToolMissing", Failed},
		{errdefs.ErrUnsafeImage, "UnsafeImage", BadImage},
		{errdefs.ErrCompressedFile, "UnsupportedCompression", BadImage},
		{errdefs.ErrArchiveFile, "ArchiveNotImage", BadImage},
		{errdefs.ErrNoDiskInArchive, "NoDiskInArchive", BadImage},
		{errdefs.ErrSeveralDisksInArchive, "SeveralDisksInArchive", BadImage},
		{errdefs.ErrTextNotImage, "TextNotImage", BadImage},
		{errdefs.ErrUnsupportedFormat, "UnsupportedFormat", BadImage},
		{errdefs.ErrInvalidImage, "InvalidImage", BadImage},
		{errdefs.ErrScratchSpaceRequired, "ScratchSpaceRequired", ScratchSpaceRequired},
		{errdefs.ErrTargetTooSmall, "TargetTooSmall", TargetTooSmall},
		{errdefs.ErrEgressDenied, "EgressDenied", SourceFailed},
		{errdefs.ErrSourceRefused, "SourceRefused", SourceFailed},
		{errdefs.ErrSourceUnreachable, "SourceUnreachable", SourceFailed},
		{errdefs.ErrTargetBusy, "TargetBusy", TargetBusy},
		{errdefs.ErrVerifyMismatch, "VerifyMismatch", Failed},
		{errdefs.ErrDeadlinePassed, "DeadlinePassed", Failed},
		{errdefs.ErrClientNotAuthorized, "ClientNotAuthorized", Failed},
		{errdefs.ErrCancelled, "Cancelled", Cancelled},
		// The engine's signals: a transfer to start over, a stream closed
		// under a reader, a layout or table the stream decoder hands to
		// another route, a target that is no delta base (a full clone
		// follows). An import that fails with one alone failed otherwise.
		{errdefs.ErrRestart, "", Failed},
		{errdefs.ErrClosed, "", Failed},
		{errdefs.ErrNotStreamable, "", Failed},
		{errdefs.ErrTablesTooLarge, "", Failed},
		{errdefs.ErrNoDeltaBase, "", Failed},
	}
}

// ReasonFailed is the reason of an error that wraps none of the sentinels
// that name a failure.
const ReasonFailed = "Failed"

// Reason is the word naming err's kind ("" for nil).
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range Rows() {
		if r.Reason != "" && errors.Is(err, r.Err) {
			return r.Reason
		}
	}
	return ReasonFailed
}

// Classify is err's class (Succeeded for nil).
func Classify(err error) Class {
	if err == nil {
		return Succeeded
	}
	for _, r := range Rows() {
		if r.Class != Failed && errors.Is(err, r.Err) {
			return r.Class
		}
	}
	return Failed
}
