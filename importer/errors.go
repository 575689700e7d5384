package importer

import "github.com/diskimport/engine/errdefs"

// Errors callers can branch on with errors.Is. They are the engine's shared
// values (package errdefs), re-exported so a controller needs one import.
var (
	ErrTargetTooSmall       = errdefs.ErrTargetTooSmall
	ErrInvalidImage         = errdefs.ErrInvalidImage
	ErrUnsafeImage          = errdefs.ErrUnsafeImage
	ErrUnsupportedFormat    = errdefs.ErrUnsupportedFormat
	ErrChecksumMismatch     = errdefs.ErrChecksumMismatch
	ErrSourceUnreachable    = errdefs.ErrSourceUnreachable
	ErrSourceRefused        = errdefs.ErrSourceRefused
	ErrCancelled            = errdefs.ErrCancelled
	ErrTargetBusy           = errdefs.ErrTargetBusy
	ErrScratchSpaceRequired = errdefs.ErrScratchSpaceRequired
	ErrInvalidOptions       = errdefs.ErrInvalidOptions
	// ErrVerifyMismatch: with Options.Verify, the target read back differs
	// from the source (a *VerifyError says what was compared).
	ErrVerifyMismatch = errdefs.ErrVerifyMismatch
	// ErrToolMissing: qemu-img, which this import's route needs, is not
	// installed (the stream decoder takes what it can without it).
	ErrToolMissing = errdefs.ErrToolMissing
	// ErrEgressDenied: the egress policy (Options.Egress) refused the
	// address a source would connect to (an *EgressError names it).
	ErrEgressDenied = errdefs.ErrEgressDenied
	// What a refused source is instead of a disk image; each comes in a
	// *NotImageError, which matches ErrUnsupportedFormat too.
	ErrCompressedFile        = errdefs.ErrCompressedFile
	ErrArchiveFile           = errdefs.ErrArchiveFile
	ErrNoDiskInArchive       = errdefs.ErrNoDiskInArchive
	ErrSeveralDisksInArchive = errdefs.ErrSeveralDisksInArchive
	ErrTextNotImage          = errdefs.ErrTextNotImage
)

// NotImageError says what a source is instead of a disk image.
type NotImageError = errdefs.NotImageError

// HTTPStatusError is returned when an HTTP source answers with a non-2xx
// status; use errors.As to read the status code.
type HTTPStatusError = errdefs.HTTPStatusError

// SizeError states both sizes when an image does not fit its target.
type SizeError = errdefs.SizeError

// VerifyError states what was compared when verification failed; it
// matches ErrVerifyMismatch.
type VerifyError = errdefs.VerifyError

// EgressError names the address the egress policy refused and the rule;
// it matches ErrEgressDenied and ErrSourceRefused.
type EgressError = errdefs.EgressError
