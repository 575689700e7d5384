package cdi

import (
	"errors"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

// ReasonFailed is the reason of an error that wraps none of the sentinels.
const ReasonFailed = importer.ReasonFailed

// Reason is importer.Reason: the word the result's "reason" field holds.
func Reason(err error) string { return importer.Reason(err) }

// HTTPStatus is the status code of the HTTP answer that failed the import,
// or 0 when no HTTP status is involved.
func HTTPStatus(err error) int {
	var se *errdefs.HTTPStatusError
	if errors.As(err, &se) {
		return se.StatusCode
	}
	return 0
}
