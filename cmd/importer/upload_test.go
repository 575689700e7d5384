package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/internal/testpki"
	"github.com/diskimport/engine/internal/testtar"
	"github.com/diskimport/engine/uploadserver"
)

// freeAddr is an address of 127.0.0.1 nobody listens on now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// serverCertificate writes a CA's certificate for 127.0.0.1 and its key as
// PEM files in dir, and returns them with a pool trusting the CA.
func serverCertificate(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	ca := testpki.NewCA(t, dir, "upload")
	srv := ca.Server("tls")
	return srv.CertFile, srv.KeyFile, ca.Pool()
}

// runAsync runs the CLI in the background and returns its exit code channel.
func runAsync(t *testing.T, getenv func(string) string, args ...string) <-chan int {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out, errb bytes.Buffer
	go func() {
		code := run(ctx, args, nil, &out, &errb, getenv)
		t.Logf("importer %v → %d\nstderr:\n%s", args, code, errb.String())
		done <- code
	}()
	t.Cleanup(cancel)
	return done
}

func waitHealthy(t *testing.T, client *http.Client, base string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get(base + uploadserver.PathHealthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("upload server never became healthy")
}

func uploadFile(t *testing.T, client *http.Client, url, path, token string) int {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	req, err := http.NewRequest(http.MethodPut, url, f)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func waitExit(t *testing.T, done <-chan int) int {
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("importer upload-server did not exit")
		return -1
	}
}

func TestCLIUploadServerTLSToken(t *testing.T) {
	testimg.Need(t, "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 5)
	gz := testimg.Compress(t, raw, "gz")
	certFile, keyFile, pool := serverCertificate(t, dir)
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("tok3n\n"), 0o600))
	dest := filepath.Join(t.TempDir(), "disk.img")
	tl := filepath.Join(dir, "result.json")
	addr := freeAddr(t)
	done := runAsync(t, env(nil), "upload-server", "--listen", addr, "--tls-cert", certFile, "--tls-key", keyFile,
		"--token-file", tokenFile, "--termination-log", tl, dest)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + addr
	waitHealthy(t, client, base)
	assert.Equal(t, http.StatusUnauthorized, uploadFile(t, client, base+uploadserver.PathUpload, gz, ""))
	assert.Equal(t, http.StatusOK, uploadFile(t, client, base+uploadserver.PathUpload, gz, "tok3n"))
	assert.Equal(t, cdi.ExitOK, waitExit(t, done))
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
	b, err := os.ReadFile(tl)
	require.NoError(t, err)
	m := decode(t, b)
	assert.Equal(t, cdi.MessageUploadComplete, m.Message)
	assert.Equal(t, "gz", m.Compression)
}

func TestEnvUploadArchive(t *testing.T) {
	root := cdiRoot(t)
	tree := testtar.Sample()
	tarPath := testtar.Write(t, t.TempDir(), "tree.tar", tree)
	addr := freeAddr(t)
	done := runAsync(t, env(map[string]string{
		"IMPORTER_SOURCE":        "upload",
		"IMPORTER_CONTENTTYPE":   "archive",
		"IMPORTER_PATH_PREFIX":   root,
		"IMPORTER_UPLOAD_LISTEN": addr,
	}))
	base := "http://" + addr
	waitHealthy(t, http.DefaultClient, base)
	assert.Equal(t, http.StatusOK, uploadFile(t, http.DefaultClient, base+uploadserver.PathUpload, tarPath, ""))
	assert.Equal(t, cdi.ExitOK, waitExit(t, done))
	testtar.Verify(t, filepath.Join(root, "data"), tree)
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	assert.Equal(t, "Import Complete", decode(t, b).Message)
}

func TestCLIArchiveContentType(t *testing.T) {
	tree := testtar.Sample()
	tarPath := testtar.Write(t, t.TempDir(), "tree.tar", tree)
	dest := t.TempDir()
	code, _, _ := runCLI(t, nil, env(nil), "--content-type", "archive", tarPath, dest)
	require.Equal(t, cdi.ExitOK, code)
	testtar.Verify(t, dest, tree)
	code, _, stderr := runCLI(t, nil, env(nil), "--content-type", "archive", tarPath, filepath.Join(dest, "etc", "config"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "not a directory")
}

// TestEnvUploadServerWithoutClientCARefusesUploads: CDI's upload-server
// environment with a server certificate but no CLIENT_CERT_FILE answers
// every upload 401 before reading it (CDI's server does: no client CA, no
// client name to match), while /healthz still answers the kubelet.
func TestEnvUploadServerWithoutClientCARefusesUploads(t *testing.T) {
	root := cdiRoot(t)
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 9)
	certFile, keyFile, pool := serverCertificate(t, dir)
	dest := filepath.Join(t.TempDir(), "disk.img")
	addr := freeAddr(t)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	done := runAsync(t, env(map[string]string{
		"IMPORTER_PATH_PREFIX": root, "LISTEN_ADDRESS": host, "LISTEN_PORT": port, "DESTINATION": dest,
		"TLS_CERT_FILE": certFile, "TLS_KEY_FILE": keyFile,
	}), "upload-server")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + addr
	waitHealthy(t, client, base)
	for _, path := range []string{uploadserver.PathUpload, uploadserver.PathUploadAsync, uploadserver.PathUploadArchive} {
		assert.Equal(t, http.StatusUnauthorized, uploadFile(t, client, base+path, raw, ""), path)
	}
	assert.NoFileExists(t, dest)
	select {
	case code := <-done:
		t.Fatalf("the server exited (%d) instead of refusing", code)
	default:
	}
}

// envUploadServer is CDI's upload-server environment with mutual TLS
// (client name proxyName) listening at addr, under root.
func envUploadServer(t *testing.T, ca *testpki.CA, root, addr string) map[string]string {
	server := ca.Server("upload-server")
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return map[string]string{
		"IMPORTER_PATH_PREFIX": root, "LISTEN_ADDRESS": host, "LISTEN_PORT": port,
		"TLS_CERT_FILE": server.CertFile, "TLS_KEY_FILE": server.KeyFile,
		"CLIENT_CERT_FILE": ca.File, "CLIENT_NAME": proxyName,
	}
}

// TestEnvUploadServerFailureEndsAsCDIs: an upload-server pod that cannot
// serve (its port is taken) exits 1 with CDI's plain-text ending,
// "UploadServer failed: CAUSE", as its last log line and as its
// termination message (text, not JSON, after a non-zero exit).
func TestEnvUploadServerFailureEndsAsCDIs(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	root := cdiRoot(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	code, _, stderr := runCLI(t, nil, env(envUploadServer(t, ca, root, taken.Addr().String())), "upload-server")
	assert.Equal(t, cdi.ExitFailed, code)
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	text := failureText(t, b)
	assert.True(t, strings.HasPrefix(text, "UploadServer failed: "), text)
	assert.Contains(t, text, "address already in use")
	assert.Contains(t, lastLine(stderr), "UploadServer failed: ")
	assert.Contains(t, lastLine(stderr), "address already in use")

	// An environment the server refuses ends the same way.
	e := envUploadServer(t, ca, root, "127.0.0.1:1")
	e["LISTEN_PORT"] = "eighty"
	code, _, stderr = runCLI(t, nil, env(e), "upload-server")
	assert.Equal(t, cdi.ExitFailed, code)
	b, err = os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	assert.Equal(t, `UploadServer failed: LISTEN_PORT="eighty": want a port number: invalid options`, failureText(t, b))
	assert.Contains(t, lastLine(stderr), `UploadServer failed: LISTEN_PORT=\"eighty\"`)
}

// TestEnvUploadServerSuccessEndsAsCDIs: after Upload Complete the last log
// line is CDI's "UploadServer successfully exited", and the image is
// written.
func TestEnvUploadServerSuccessEndsAsCDIs(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	root := cdiRoot(t)
	img := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 31)
	addr := freeAddr(t)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"upload-server"}, nil, new(bytes.Buffer), &stderr, env(envUploadServer(t, ca, root, addr)))
	}()
	good := ca.Client(proxyName)
	client := mtlsClient(t, ca, &good)
	waitHealthy(t, client, "https://"+addr)
	assert.Equal(t, http.StatusOK, uploadFile(t, client, "https://"+addr+uploadserver.PathUpload, img, ""))
	assert.Equal(t, cdi.ExitOK, waitExit(t, done))
	t.Logf("stderr:\n%s", stderr.String())
	assert.Contains(t, lastLine(stderr.String()), cdi.UploadServerSucceeded)
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	assert.Equal(t, cdi.MessageUploadComplete, decode(t, b).Message)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, filepath.Join(root, "data/disk.img"), -1))
}
