package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/internal/cdi"
)

// assertFirstLine checks that the first line of a pod's log contains want.
func assertFirstLine(t *testing.T, log, want string) {
	t.Helper()
	first, _, _ := strings.Cut(log, "\n")
	assert.Contains(t, first, want, "first log line; whole log:\n%s", log)
}

// Started with only CDI's -v=N, the importer's environment makes it the
// importer, and the first log line says so.
func TestPodRoleImporterFirstLogLine(t *testing.T) {
	root := cdiRoot(t)
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE": "none", "IMPORTER_IMAGE_SIZE": "1Mi", "PREALLOCATION": "false",
		"IMPORTER_PATH_PREFIX": root, "IMPORTER_METRICS_LISTEN": "off",
	}), "-v=1")
	assert.Equal(t, cdi.ExitOK, code, stderr)
	assertFirstLine(t, stderr, `msg="Running as CDI's importer pod" role=importer chosenBy=IMPORTER_SOURCE`)
}

// Two pods' variables in one environment are refused before anything
// runs, naming both.
func TestPodRoleRefusesAmbiguousEnvironment(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://127.0.0.1:1/disk.img",
		"TLS_CERT_FILE": "/certs/tls.crt", "TLS_KEY_FILE": "/certs/tls.key",
	}), "-v=1")
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "more than one of CDI's pods: importer (IMPORTER_SOURCE) and upload-server (TLS_CERT_FILE, TLS_KEY_FILE)")
	assert.NotContains(t, stderr, "Running as", "no role is taken")
}
