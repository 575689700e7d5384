package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/internal/testpki"
	"github.com/diskimport/engine/uploadserver"
)

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
