package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
)

// A failure reads as one sentence in the user's words: the server's answer
// and the URL once, no CDI prefix, no sentinel words in the middle.
func TestCLIFailuresReadInTheUsersWords(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	refused := closedPortURL(t)
	addr := strings.TrimSuffix(strings.TrimPrefix(refused, "http://"), "/disk.img")
	missing := filepath.Join(dir, "nope.qcow2")
	for _, tc := range []struct {
		name, source, want string
	}{
		{"404", srv.URL + "/disk.img", "the server answered 404 Not Found for " + srv.URL + "/disk.img"},
		{"connection refused", refused, "GET " + refused + ": dial tcp " + addr + ": connect: connection refused"},
		{"missing file", missing, "source file " + missing + " does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, env(nil), "--json", tc.source, filepath.Join(dir, "disk.img"))
			assert.Equal(t, cdi.ExitFailed, code)
			assert.Equal(t, "importer: import failed: "+tc.want+"\n", stderr)
			assert.Equal(t, tc.want, decode(t, []byte(stdout)).Message, "the JSON's message has no CDI prefix")
		})
	}
}

// An empty standard input is called standard input, not "upload".
func TestCLIEmptyStdinIsStandardInput(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(nil), "-", filepath.Join(t.TempDir(), "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "reading the header of standard input: ")
	assert.NotContains(t, stderr, "upload")
}

// Cancelled in the middle of a download (Ctrl-C cancels the context), the
// run says so in two words: no "context canceled", no read error.
func TestCLICancelledSaysCancelled(t *testing.T) {
	srv := slowServer(t, bytes.Repeat([]byte{7}, 16<<20), 64<<10, 50*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--json", srv.URL + "/disk.img", filepath.Join(t.TempDir(), "disk.img")}, nil, &stdout, &stderr, env(nil))
	t.Logf("stderr: %s", stderr.String())
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Equal(t, "importer: import cancelled\n", stderr.String())
	m := decode(t, stdout.Bytes())
	assert.Equal(t, "import cancelled", m.Message)
	assert.Equal(t, "Cancelled", m.Reason)
	require.NotContains(t, stderr.String(), "context canceled")
}
