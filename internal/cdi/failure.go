package cdi

import (
	"errors"
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// Texts CDI's importer writes as the whole termination message of a failed
// run; the controller shows them as the DataVolume's condition message and
// matches some of their words (simplifyKnownMessage).
const (
	processFailedPrefix = "Unable to process data: "
	blankFailedPrefix   = "Unable to create blank image: "
	// MessageBlankArchive is CDI's refusal of IMPORTER_SOURCE=none with
	// IMPORTER_CONTENTTYPE=archive: a blank disk has no archive form.
	MessageBlankArchive = "Cannot create empty disk with content type archive"
)

// plainFailure marks an error whose text is the whole termination message,
// with no "Unable to process data" in front: CDI writes its environment
// refusals ("Unknown data source: x") and the node-pull timeout that way.
// text, when set, replaces err's own text (CDI's fixed sentences).
type plainFailure struct {
	text string
	err  error
}

func (p *plainFailure) Error() string {
	if p.text != "" {
		return p.text
	}
	return p.err.Error()
}

func (p *plainFailure) Unwrap() error { return p.err }

// asPlain marks err (nil stays nil).
func asPlain(err error) error {
	if err == nil {
		return nil
	}
	return &plainFailure{err: err}
}

// FailureText is the plain-text termination message of a run that exits
// non-zero: what CDI's importer writes there, and the first thing a person
// sees in `kubectl describe`. It is one line of at most 4096 bytes; a
// longer one is cut at its end, so the cause, which comes first, stays.
func FailureText(kind Kind, err error) string {
	text := err.Error()
	var plain *plainFailure
	var status *errdefs.HTTPStatusError
	if errors.As(err, &status) {
		text = strings.Replace(text, status.Error(), httpStatusText(status), 1)
	}
	switch {
	case errors.As(err, &plain):
	case kind == Blank:
		text = blankFailedPrefix + text
	default:
		text = processFailedPrefix + text
	}
	return oneLine(text)
}

// uploadServerFailedPrefix is what CDI's upload server logs last before it
// exits 1 (cmd/cdi-uploadserver: "UploadServer failed: %s"); it writes no
// termination message then, so its pod's FallbackToLogsOnError shows that
// line.
const uploadServerFailedPrefix = "UploadServer failed: "

// UploadServerSucceeded is the last line CDI's upload server logs after it
// wrote its termination message and before it exits 0.
const UploadServerSucceeded = "UploadServer successfully exited"

// UploadServerFailureText is the plain-text ending of an upload-server pod
// that exits 1: CDI's last log line, which its controller shows, as one
// line of at most 4096 bytes.
func UploadServerFailureText(err error) string {
	return oneLine(uploadServerFailedPrefix + err.Error())
}

// oneLine is text as a termination message: Kubernetes keeps the message,
// CDI keeps one line of it, cut at its end past 4096 bytes.
func oneLine(text string) string {
	text = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(text)
	return cutText(text, maxTerminationMessage)
}

// httpStatusText is CDI's importer's sentence for a refused HTTP request,
// whose words ("expected status code 200, got 404") CDI's controller
// shows; it takes the place of the user's words in the failure's text.
func httpStatusText(e *errdefs.HTTPStatusError) string {
	return fmt.Sprintf("expected status code 200, got %d. Status: %s (GET %s)", e.StatusCode, e.Status, e.URL)
}

// cutText shortens s to at most limit bytes on a rune boundary, marking the
// cut with an ellipsis.
func cutText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	return s[:runeStart(s, limit-len(ellipsis))] + ellipsis
}
