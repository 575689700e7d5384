package errdefs

import "errors"

// What a source can be instead of a disk image. Each is matched by a
// *NotImageError, which also matches ErrUnsupportedFormat.
var (
	// ErrCompressedFile: a compression the engine does not remove (bzip2,
	// lz4, lzip…); the user decompresses it first.
	ErrCompressedFile = errors.New("compressed in a format that is not decompressed")
	// ErrArchiveFile: an archive (zip, 7z, rar, a container image
	// layout…) whose members the engine does not open.
	ErrArchiveFile = errors.New("an archive, not a disk image")
	// ErrNoDiskInArchive: a tar holding no disk image.
	ErrNoDiskInArchive = errors.New("no disk image in the archive")
	// ErrSeveralDisksInArchive: a tar holding more than one disk image,
	// where which one to import is a guess.
	ErrSeveralDisksInArchive = errors.New("more than one disk image in the archive")
	// ErrTextNotImage: a text body (an HTML page, a listing, an error
	// message served with 200).
	ErrTextNotImage = errors.New("text, not a disk image")
)

// NotImageError is a source refused for being something else than a disk
// image. Message says what it is, in the user's words ("a bzip2 file, not
// a disk image (decompress it first)"); Kind is one of the sentinels
// above. It matches Kind and ErrUnsupportedFormat.
type NotImageError struct {
	Message string
	Kind    error
}

func (e *NotImageError) Error() string { return e.Message }

// Unwrap makes errors.Is match Kind and ErrUnsupportedFormat.
func (e *NotImageError) Unwrap() []error { return []error{e.Kind, ErrUnsupportedFormat} }
