package cdi

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestEnvHTTPSourceSchemeIsCaseInsensitive: URL schemes are case-insensitive
// (RFC 3986), so HTTP:// is still an http endpoint.
func TestEnvHTTPSourceSchemeIsCaseInsensitive(t *testing.T) {
	assert.NoError(t, checkHTTPEndpoint("HTTP://127.0.0.1:1/disk.raw"))
	assert.NoError(t, checkHTTPEndpoint("https://user:pw@example.org/disk.raw?sig=x"))
}
