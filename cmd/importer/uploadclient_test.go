package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testpki"
	"github.com/diskimport/engine/uploadserver"
)

// uploaderName is the client name the test servers require.
const uploaderName = "uploader"

// mtlsUploadServer runs our upload server with mutual TLS on 127.0.0.1 at
// an OS-picked port, importing to dest; it returns the base URL.
func mtlsUploadServer(t *testing.T, ca *testpki.CA, dest string, keepRunning bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	server := ca.Server("upload-server")
	srv := &uploadserver.Server{
		Options: uploadserver.Options{
			Import:     importer.Options{Target: dest, Source: "-"},
			ClientName: uploaderName, KeepRunning: keepRunning, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		},
		Listener: ln, TLSCert: server.CertFile, TLSKey: server.KeyFile, ClientCAFile: ca.File,
	}
	startUploadServer(t, srv)
	return "https://" + ln.Addr().String()
}

// startUploadServer runs srv until the test ends.
func startUploadServer(t *testing.T, srv *uploadserver.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = srv.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// uploadArgs are the mTLS flags of a client holding pair.
func uploadArgs(ca *testpki.CA, pair testpki.Pair, more ...string) []string {
	return append([]string{"upload", "--ca", ca.File, "--cert", pair.CertFile, "--key", pair.KeyFile}, more...)
}

// qemuRaw is qemu-img convert's raw output of img, the reference the
// upload's target is compared with.
func qemuRaw(t *testing.T, img string) string {
	out := filepath.Join(t.TempDir(), "reference.raw")
	testimg.Run(t, "qemu-img", "convert", "-q", "-O", "raw", img, out)
	return out
}

// TestUploadClientSendsQcow2AndRawXZOverMutualTLS: `importer upload` sends a
// qcow2 to the synchronous path and a raw.xz to the asynchronous one (then
// follows the status to Complete), and the server's targets hold exactly
// what qemu-img convert makes of them.
func TestUploadClientSendsQcow2AndRawXZOverMutualTLS(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	ca := testpki.NewCA(t, t.TempDir(), "upload-ca")
	client := ca.Client(uploaderName)
	dir := t.TempDir()
	_, qcow2 := testimg.RawAndQCOW2(t, dir, 6<<20, 41)

	dest := filepath.Join(t.TempDir(), "disk.img")
	base := mtlsUploadServer(t, ca, dest, false)
	code, stdout, stderr := runCLI(t, nil, env(nil), uploadArgs(ca, client, "--json", qcow2, base)...)
	require.Equal(t, cdi.ExitOK, code, stderr)
	assert.Equal(t, testimg.Digest(t, qemuRaw(t, qcow2), -1), testimg.Digest(t, dest, -1))
	var m cdi.TerminationMessage
	require.NoError(t, json.Unmarshal([]byte(stdout), &m), stdout)
	assert.Equal(t, uploadserver.MessageUploadComplete, m.Message)
	assert.Equal(t, "qcow2", m.SourceFormat)
	assert.Contains(t, stderr, "Upload complete: "+qcow2+" to "+base+uploadserver.PathUpload)
	assert.Contains(t, stderr, "the server says Upload Complete: 6.0 MiB (qcow2)")

	xzRaw := testimg.Raw(t, dir, "other.raw", 5<<20, 42)
	xz := testimg.Compress(t, xzRaw, "xz")
	dest = filepath.Join(t.TempDir(), "disk.img")
	base = mtlsUploadServer(t, ca, dest, true) // its status stays readable after the import
	code, stdout, stderr = runCLI(t, nil, env(nil), uploadArgs(ca, client, "--async", "--json", "--url", base, xz)...)
	require.Equal(t, cdi.ExitOK, code, stderr)
	assert.Equal(t, testimg.Digest(t, qemuRaw(t, xzRaw), -1), testimg.Digest(t, dest, -1))
	var st uploadserver.Status
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	assert.True(t, st.Complete)
	assert.Contains(t, stderr, base+uploadserver.PathUploadAsync)
	assert.Contains(t, stderr, "the server's status says Complete")
}

// TestUploadClientFormUpload: --form sends the multipart form our server
// (and CDI's) takes at /v1beta1/upload-form.
func TestUploadClientFormUpload(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "upload-ca")
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 2<<20, 43)
	dest := filepath.Join(t.TempDir(), "disk.img")
	base := mtlsUploadServer(t, ca, dest, false)
	code, _, stderr := runCLI(t, nil, env(nil), uploadArgs(ca, ca.Client(uploaderName), "--form", raw, base)...)
	require.Equal(t, cdi.ExitOK, code, stderr)
	assert.Contains(t, stderr, uploadserver.PathUploadForm)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}

// TestUploadClientRefusedCertificatesWriteNothing: a client certificate of
// another CA (which Go's TLS then does not send) and one of the right CA
// with another name get the server's 401, a server certificate of an
// unknown CA fails the handshake; each says why in the user's words, and
// the target is never created.
func TestUploadClientRefusedCertificatesWriteNothing(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "upload-ca")
	other := testpki.NewCA(t, t.TempDir(), "other-ca")
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 44)
	dest := filepath.Join(t.TempDir(), "disk.img")
	base := mtlsUploadServer(t, ca, dest, false)

	code, _, stderr := runCLI(t, nil, env(nil), uploadArgs(ca, other.Client(uploaderName), raw, base)...)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "importer: upload failed: the server answered 401 Unauthorized for "+base+uploadserver.PathUpload+
		": no client certificate signed by the client CA was presented")
	assert.Contains(t, stderr, "the client certificate of --cert was not accepted")
	assert.NotContains(t, stderr, "Upload complete")
	assert.NoFileExists(t, dest)

	code, _, stderr = runCLI(t, nil, env(nil), uploadArgs(ca, ca.Client("somebody"), raw, base)...)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, `the server answered 401 Unauthorized for `+base+uploadserver.PathUpload+`: client certificate "somebody" is not "uploader"`)
	assert.NoFileExists(t, dest)

	// Without --ca the server's certificate is not trusted.
	code, _, stderr = runCLI(t, nil, env(nil), "upload", raw, base)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "TLS: the server's certificate is not signed by a CA this client trusts (give the server's CA with --ca)")
	assert.NoFileExists(t, dest)
}

// TestUploadClientShowsTheServersRefusal: an upload the server refuses
// (a text file is not a disk image) fails with the status and the
// server's own words.
func TestUploadClientShowsTheServersRefusal(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "upload-ca")
	page := filepath.Join(t.TempDir(), "index.html")
	require.NoError(t, os.WriteFile(page, []byte("<!DOCTYPE html>\n<html><body>Not here, sorry.</body></html>\n"), 0o644))
	dest := filepath.Join(t.TempDir(), "disk.img")
	base := mtlsUploadServer(t, ca, dest, false)
	code, _, stderr := runCLI(t, nil, env(nil), uploadArgs(ca, ca.Client(uploaderName), page, base)...)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "the server answered 400 Bad Request for "+base+uploadserver.PathUpload+": ")
	assert.Contains(t, stderr, "not a disk image")
	assert.NoFileExists(t, dest)
}

// TestUploadClientServerDroppingMidUploadFails: a server that closes the
// connection after 1 MiB of an 8 MiB upload is a failure naming how far
// the upload got, never a success.
func TestUploadClientServerDroppingMidUploadFails(t *testing.T) {
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 8<<20, 45)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			return // 200, as upload servers answer
		}
		_, _ = io.CopyN(io.Discard, r.Body, 1<<20)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	code, _, stderr := runCLI(t, nil, env(nil), "upload", raw, srv.URL)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "importer: upload failed: the connection to "+srv.URL+uploadserver.PathUpload+" broke after ")
	assert.Contains(t, stderr, "the import did not complete")
	assert.NotContains(t, stderr, "Upload complete")
}

// TestUploadClientUsage: the URL once, a cert with its key, a file that
// exists; each a usage error (exit 2).
func TestUploadClientUsage(t *testing.T) {
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 46)
	for name, args := range map[string][]string{
		"no URL":         {"upload", raw},
		"two URLs":       {"upload", "--url", "https://h", raw, "https://h"},
		"cert alone":     {"upload", "--cert", raw, raw, "https://h"},
		"missing file":   {"upload", raw + ".nope", "https://h"},
		"not a URL":      {"upload", raw, "h:8443"},
		"path and async": {"upload", "--async", raw, "https://h/v1beta1/upload"},
	} {
		code, _, _ := runCLI(t, nil, env(nil), args...)
		assert.Equal(t, cdi.ExitUsage, code, name)
	}
}

// TestUploadClientNamesAHandshakeRefusal: CDI's upload server requires a
// verified client certificate in the handshake itself; a client without
// one, or with one of another CA, is told the server wants a certificate.
func TestUploadClientNamesAHandshakeRefusal(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "upload-ca")
	other := testpki.NewCA(t, t.TempDir(), "other-ca")
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 47)
	pair := ca.Server("cdi-uploadserver")
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	require.NoError(t, err)
	reached := false
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	for name, args := range map[string][]string{
		"no certificate": {"upload", "--ca", ca.File, raw, srv.URL},
		"another CA's":   uploadArgs(ca, other.Client(uploaderName), raw, srv.URL),
	} {
		code, _, stderr := runCLI(t, nil, env(nil), args...)
		assert.Equal(t, cdi.ExitFailed, code, name)
		assert.Contains(t, stderr, "importer: upload failed: TLS: the server requires a client certificate (give --cert and --key", name)
	}
	assert.False(t, reached, "no request got past the handshake")
}

// TestUploadClientBearerToken: --token-file sends Authorization: Bearer, as
// CDI's upload proxy and our --token-file server take it; a wrong token
// is the server's 401 and writes nothing.
func TestUploadClientBearerToken(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 48)
	dest := filepath.Join(t.TempDir(), "disk.img")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &uploadserver.Server{Options: uploadserver.Options{Import: importer.Options{Target: dest, Source: "-"}, Token: "s3cret",
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}, Listener: ln}
	startUploadServer(t, srv)
	base := "http://" + ln.Addr().String()
	wrong, right := filepath.Join(dir, "wrong"), filepath.Join(dir, "right")
	require.NoError(t, os.WriteFile(wrong, []byte("guess\n"), 0o600))
	require.NoError(t, os.WriteFile(right, []byte("s3cret\n"), 0o600))
	code, _, stderr := runCLI(t, nil, env(nil), "upload", "--token-file", wrong, raw, base)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "the server answered 401 Unauthorized for "+base+uploadserver.PathUpload+": missing or wrong bearer token")
	assert.NoFileExists(t, dest)
	code, _, stderr = runCLI(t, nil, env(nil), "upload", "--token-file", right, raw, base)
	require.Equal(t, cdi.ExitOK, code, stderr)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}

// slowBody reads at most 64 KiB per pause, so an upload lasts seconds.
type slowBody struct {
	io.ReadCloser
	pause time.Duration
}

func (b slowBody) Read(p []byte) (int, error) {
	time.Sleep(b.pause)
	return b.ReadCloser.Read(p[:min(len(p), 64<<10)])
}

// On a terminal `importer upload` draws the import's mpb bar: the Upload
// phase with its percent, the bytes sent of the file's size, a rate and
// an ETA; at the end the bar is at 100% on every byte and the final line
// follows, and the server's target holds the file.
func TestUploadClientTerminalProgressBar(t *testing.T) {
	dir, bin := builtImporter(t, "tmux")
	img := testimg.Raw(t, dir, "disk.raw", 6<<20, 49)
	dest := filepath.Join(t.TempDir(), "disk.img")
	h := uploadserver.NewHandler(uploadserver.Options{Import: importer.Options{Target: dest}, KeepRunning: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = slowBody{r.Body, 62 * time.Millisecond} // about 1 MiB/s
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); h.Wait() })
	pane := startTmux(t, fmt.Sprintf("%s upload %s %s; echo EXIT=$?; sleep 60", bin, img, srv.URL))

	bar := regexp.MustCompile(`Uploading +\[[=>\-_ ]*\] +[0-9.]+% +[0-9.]+ [KM]iB / 6\.0 MiB +[0-9.]+ [KM]iB/s +ETA [0-9]+s`)
	// Until the bar shows (the upload lasts 6 s once it begins).
	mid := pane.waitUntil(bar.MatchString, time.Minute)
	t.Logf("during the upload:\n%s", mid)
	assert.Regexp(t, bar, mid)
	end := pane.waitFor("EXIT=", time.Minute)
	t.Logf("at the end:\n%s", end)
	assert.Contains(t, end, "EXIT=0")
	assert.Regexp(t, `Done +\[=+\] +100\.0% +6\.0 MiB / 6\.0 MiB`, end)
	assert.Contains(t, end, "Upload complete: "+img+" to "+srv.URL+uploadserver.PathUpload+", 6.0 MiB sent in ")
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dest, -1))
}

// Under --log-format json every line `importer upload` writes to stderr is
// JSON, its ending included: "Upload complete" with the bytes sent, or an
// ERROR "upload failed" with the cause.
func TestUploadClientLogFormatJSON(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "upload-ca")
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 50)
	dest := filepath.Join(t.TempDir(), "disk.img")
	base := mtlsUploadServer(t, ca, dest, false)
	records := func(stderr string) []map[string]any { return jsonRecords(t, stderr) }
	code, _, stderr := runCLI(t, nil, env(nil), "upload", "--log-format", "json", raw, base) // the server's CA not given
	require.Equal(t, cdi.ExitFailed, code)
	last := records(stderr)[len(records(stderr))-1]
	assert.Equal(t, "ERROR", last["level"])
	assert.Equal(t, "upload failed", last["msg"])
	assert.Contains(t, last["error"], "TLS: the server's certificate is not signed by a CA this client trusts")

	code, _, stderr = runCLI(t, nil, env(nil), uploadArgs(ca, ca.Client(uploaderName), "--log-format", "json", raw, base)...)
	require.Equal(t, cdi.ExitOK, code)
	last = records(stderr)[len(records(stderr))-1]
	assert.Equal(t, "Upload complete", last["msg"])
	assert.EqualValues(t, 1<<20, last["bytesSent"])
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}

// `importer upload - URL` sends standard input (its length unknown: sent
// chunked) and names it so.
func TestUploadClientStandardInput(t *testing.T) {
	testimg.Need(t, "xz")
	ca := testpki.NewCA(t, t.TempDir(), "upload-ca")
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 3<<20, 53)
	xz, err := os.ReadFile(testimg.Compress(t, raw, "xz"))
	require.NoError(t, err)
	dest := filepath.Join(t.TempDir(), "disk.img")
	base := mtlsUploadServer(t, ca, dest, false)
	code, _, stderr := runCLI(t, xz, env(nil), uploadArgs(ca, ca.Client(uploaderName), "-", base)...)
	require.Equal(t, cdi.ExitOK, code, stderr)
	assert.Contains(t, stderr, "Upload complete: standard input to "+base+uploadserver.PathUpload)
	assert.Contains(t, stderr, "(raw.xz)")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}
