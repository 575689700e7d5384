package cdi

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

func TestMessageReasonAndHTTPStatus(t *testing.T) {
	err := fmt.Errorf("GET x: %w", &errdefs.HTTPStatusError{URL: "x", StatusCode: 404, Status: "404 Not Found"})
	m := NewTerminationMessage(&importer.Result{}, err)
	assert.Equal(t, "SourceRefused", m.Reason)
	assert.Equal(t, 404, m.HTTPStatus)
	assert.Contains(t, string(m.JSON()), `"reason":"SourceRefused","httpStatus":404`)

	ok := NewTerminationMessage(&importer.Result{Complete: true}, nil)
	assert.NotContains(t, string(ok.JSON()), "reason")
	assert.NotContains(t, string(ok.JSON()), "httpStatus")
	assert.Equal(t, "Cancelled", Reason(fmt.Errorf("%w: %w", errdefs.ErrCancelled, context.Canceled)))
}
