package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

// closedPortURL is an http URL on a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr + "/disk.img"
}

// A refused connection on the command line fails at once: retries are for
// transfers that started and broke.
func TestCLIConnectionRefusedFailsFast(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	code, _, stderr := runCLI(t, nil, env(nil), closedPortURL(t), filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Contains(t, stderr, "connection refused")
	assert.NotContains(t, stderr, "retrying")
	assert.NoFileExists(t, filepath.Join(dir, "disk.img"))
}

func TestCLIMissingLocalFileSaysSo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.qcow2")
	code, _, stderr := runCLI(t, nil, env(nil), missing, filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "source file "+missing+" does not exist")
	assert.NotContains(t, stderr, "connect")
}

func TestCLIRefusesBadFlagValues(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 1)
	for _, args := range [][]string{
		{"--cache-mode", "weird"},
		{"--format", "vmdk"},
		{"--format-in", "qcow2"},
		{"--content-type", "tarball"},
		{"--log-format", "xml"},
	} {
		code, _, stderr := runCLI(t, nil, env(nil), append(args, src, filepath.Join(dir, "out.img"))...)
		assert.Equal(t, cdi.ExitUsage, code, args)
		assert.Contains(t, stderr, args[1], args)
		assert.NoFileExists(t, filepath.Join(dir, "out.img"))
	}
}

// A streamed raw image too big for its target names both sizes, in bytes
// and in human units: the whole size when the source tells it, else what
// the stream had passed.
func TestCLITooBigRawNamesBothSizes(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 3<<20, 2)
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)

	code, _, stderr := runCLI(t, nil, env(nil), "--size", "2Mi", srv.URL+"/disk.raw", filepath.Join(dir, "out.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "image size 3145728 is larger than the reported available storage 2097152 (3.0 MiB for 2.0 MiB, 1048576 bytes short): a larger volume is required")
	assert.NotContains(t, stderr, "PVC")

	code, _, stderr = runCLI(t, data, env(nil), "--size", "2Mi", "-", filepath.Join(dir, "out.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "(more than 2.0 MiB for 2.0 MiB)")
	assert.NoFileExists(t, filepath.Join(dir, "out.img"))
}

// The result JSON names the failure's kind and the HTTP status, so a
// script does not parse the message.
func TestCLIResultNamesReasonAndStatus(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	code, stdout, _ := runCLI(t, nil, env(nil), "--json", srv.URL+"/disk.img", filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	m := decode(t, []byte(stdout))
	assert.Equal(t, "SourceRefused", m.Reason)
	assert.Equal(t, 404, m.HTTPStatus)

	code, stdout, _ = runCLI(t, nil, env(nil), "--json", closedPortURL(t), filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	m = decode(t, []byte(stdout))
	assert.Equal(t, "SourceUnreachable", m.Reason)
	assert.Zero(t, m.HTTPStatus)
}

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
	srv := pacedServer(t, bytes.Repeat([]byte{7}, 16<<20), 64<<10, 50*time.Millisecond, 0)
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
