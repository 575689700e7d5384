package errdefs

import "errors"

// ErrDeadlinePassed: an upload server's deadline passed before an upload
// completed (CDI's upload pod then reports deadlinePassed and exits).
var ErrDeadlinePassed = errors.New("deadline passed before an upload completed")

// ErrClientNotAuthorized: an upload client presented no certificate, one
// that does not chain to the client CA, or one with another name.
var ErrClientNotAuthorized = errors.New("upload client not authorized")
