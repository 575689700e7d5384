package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testpki"
	"github.com/diskimport/engine/internal/testkit/testtar"
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

// waitHealthy polls until the server answers healthy: it returns at the
// first such answer, so its minute is only for a server that never starts.
func waitHealthy(t *testing.T, client *http.Client, base string) {
	deadline := time.Now().Add(time.Minute)
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
	assert.Equal(t, uploadserver.MessageUploadComplete, m.Message)
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
	assert.Equal(t, uploadserver.MessageUploadComplete, decode(t, b).Message)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, filepath.Join(root, "data/disk.img"), -1))
}

// proxyName is the CLIENT_NAME of these pods (CDI's upload proxy).
const proxyName = "cdi-uploadproxy"

// rolePod runs the binary as `importer ARGS…` in a pod: /importer is a
// wrapper script that execs the real binary with them (CDI gives the
// upload-server pod -v=N and the cloner pod nothing).
func rolePod(t *testing.T, p pod, args string) pod {
	bin := needPods(t)
	script := filepath.Join(t.TempDir(), "entrypoint")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nexec /importer-bin "+args+"\n"), 0o755))
	if p.volumes == nil {
		p.volumes = map[string]string{}
	}
	p.volumes["/importer"], p.volumes["/importer-bin"] = script, bin
	return p
}

// uploadPod is CDI's upload-server pod with mutual TLS, its certificates
// mounted at /certs, listening at addr.
func uploadPod(t *testing.T, ca *testpki.CA, addr string, env map[string]string, volumes map[string]string) pod {
	certs := t.TempDir()
	server := ca.Server("upload-server")
	for name, src := range map[string]string{"tls.crt": server.CertFile, "tls.key": server.KeyFile, "client-ca.crt": ca.File} {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(certs, name), b, 0o600))
	}
	host, port := splitAddr(t, addr)
	e := map[string]string{
		"LISTEN_ADDRESS": host, "LISTEN_PORT": port,
		"TLS_CERT_FILE": "/certs/tls.crt", "TLS_KEY_FILE": "/certs/tls.key",
		"CLIENT_CERT_FILE": "/certs/client-ca.crt", "CLIENT_NAME": proxyName,
	}
	for k, v := range env {
		e[k] = v
	}
	vols := map[string]string{"/certs": certs}
	for k, v := range volumes {
		vols[k] = v
	}
	return rolePod(t, pod{env: e, volumes: vols}, "-v=3")
}

func splitAddr(t *testing.T, addr string) (string, string) {
	i := strings.LastIndex(addr, ":")
	require.Positive(t, i)
	return addr[:i], addr[i+1:]
}

func mtlsClient(t *testing.T, ca *testpki.CA, pair *testpki.Pair) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = testpki.ClientTLS(t, ca, pair)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

type uploadPodMessage struct {
	Message              string `json:"message"`
	PreallocationApplied *bool  `json:"preallocationApplied"`
	DeadlinePassed       bool   `json:"deadlinePassed"`
	SourceDigest         string `json:"sourceDigest"`
	Verified             bool   `json:"verified"`
}

func decodeUploadPod(t *testing.T, b []byte) uploadPodMessage {
	var m uploadPodMessage
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// TestUploadServerPod: the upload server under CDI's env refuses clients
// without the proxy's certificate before it writes, then imports an upload
// and says Upload Complete.
func TestUploadServerPod(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	data := t.TempDir()
	addr := freeAddr(t)
	rp := startPod(t, uploadPod(t, ca, addr, nil, map[string]string{"/data": data}))
	img := testimg.Raw(t, t.TempDir(), "disk.raw", 3<<20, 21)
	base := "https://" + addr
	good := ca.Client(proxyName)
	wrong := ca.Client("somebody")
	waitHealthy(t, mtlsClient(t, ca, nil), base) // the kubelet's probe has no certificate
	head, err := mtlsClient(t, ca, &good).Head(base + uploadserver.PathUploadAsync)
	require.NoError(t, err)
	head.Body.Close()
	assert.Equal(t, http.StatusOK, head.StatusCode)
	for name, c := range map[string]*http.Client{"no certificate": mtlsClient(t, ca, nil), "wrong name": mtlsClient(t, ca, &wrong)} {
		assert.Equal(t, http.StatusUnauthorized, uploadFile(t, c, base+uploadserver.PathUpload, img, ""), name)
		assert.NoFileExists(t, filepath.Join(data, "disk.img"), name)
	}
	assert.Equal(t, http.StatusOK, uploadFile(t, mtlsClient(t, ca, &good), base+uploadserver.PathUpload, img, ""))
	assert.Equal(t, 0, rp.wait(t))
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, filepath.Join(data, "disk.img"), -1))
	m := decodeUploadPod(t, rp.terminationLog(t))
	assert.Equal(t, uploadserver.MessageUploadComplete, m.Message)
	require.NotNil(t, m.PreallocationApplied)
	assert.False(t, *m.PreallocationApplied)
}

// TestUploadServerPodArchive: /v1beta1/upload-archive extracts into /data.
func TestUploadServerPodArchive(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	data := t.TempDir()
	addr := freeAddr(t)
	rp := startPod(t, uploadPod(t, ca, addr, nil, map[string]string{"/data": data}))
	tree := testtar.Sample()
	tarPath := testtar.Write(t, t.TempDir(), "tree.tar", tree)
	good := ca.Client(proxyName)
	c := mtlsClient(t, ca, &good)
	waitHealthy(t, c, "https://"+addr)
	assert.Equal(t, http.StatusOK, uploadFile(t, c, "https://"+addr+uploadserver.PathUploadArchive, tarPath, ""))
	assert.Equal(t, 0, rp.wait(t))
	testtar.Verify(t, data, tree)
	assert.Equal(t, uploadserver.MessageUploadComplete, decodeUploadPod(t, rp.terminationLog(t)).Message)
}

// TestUploadServerPodDeadline: with no upload before DEADLINE the pod exits
// 0 with CDI's exact message, and the volume is untouched.
func TestUploadServerPodDeadline(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	data := t.TempDir()
	deadline := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)
	rp := startPod(t, uploadPod(t, ca, freeAddr(t), map[string]string{"DEADLINE": deadline}, map[string]string{"/data": data}))
	assert.Equal(t, 0, rp.wait(t))
	assert.Equal(t, `{"deadlinePassed":true,"message":"Deadline Passed"}`, strings.TrimSpace(string(rp.terminationLog(t))))
	assert.Empty(t, testimg.DirNames(t, data))
}

// TestClonePods: the cloner pod (CDI's env, a filesystem volume) streams
// to the upload-server pod (CDI's env, mutual TLS); both are the binary
// started as CDI starts them (no command; -v=3 for the upload server, no
// argument for the cloner), say which role they took in their first log
// line, and say Clone Complete.
func TestClonePods(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	source, target := t.TempDir(), t.TempDir()
	img := testimg.Raw(t, source, "disk.img", 4<<20, 23)
	require.NoError(t, os.WriteFile(filepath.Join(source, "other.txt"), []byte("beside the disk"), 0o644))
	addr := freeAddr(t)
	server := startPod(t, uploadPod(t, ca, addr, nil, map[string]string{"/data": target}))
	waitHealthy(t, mtlsClient(t, ca, nil), "https://"+addr)
	client := ca.Client(proxyName)
	clonerPod := rolePod(t, pod{
		env: map[string]string{
			"VOLUME_MODE": "filesystem", "MOUNT_POINT": "/var/run/cdi/clone/source",
			"UPLOAD_URL": "https://" + addr + uploadserver.PathUpload, "OWNER_UID": "uid-1",
			"CLIENT_CERT": string(client.CertPEM), "CLIENT_KEY": string(client.KeyPEM), "SERVER_CA_CERT": string(ca.PEM),
			"PREALLOCATION": "false", "IMPORTER_METRICS_LISTEN": freeAddr(t),
		},
		volumes: map[string]string{"/var/run/cdi/clone/source": source},
	}, "")
	code, termLog, out := runPod(t, clonerPod)
	assert.Equal(t, 0, code)
	assertFirstLine(t, out, `msg="Running as CDI's clone-source pod" role=clone-source chosenBy=UPLOAD_URL,VOLUME_MODE,MOUNT_POINT,CLIENT_CERT,CLIENT_KEY,SERVER_CA_CERT`)
	assertFirstLine(t, server.stderr.String(), `msg="Running as CDI's upload-server pod" role=upload-server chosenBy=TLS_CERT_FILE,TLS_KEY_FILE,CLIENT_CERT_FILE,CLIENT_NAME`)
	assert.Equal(t, uploadserver.MessageCloneComplete, string(termLog))
	assert.Equal(t, 0, server.wait(t))
	assert.Equal(t, uploadserver.MessageCloneComplete, decodeUploadPod(t, server.terminationLog(t)).Message)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, filepath.Join(target, "disk.img"), -1))
	b, err := os.ReadFile(filepath.Join(target, "other.txt"))
	require.NoError(t, err)
	assert.Equal(t, "beside the disk", string(b))
}

// TestCloneIntoUploadPodBlock: our cloner (sparse-v2) into the upload-server
// pod's block volume: verified, Clone Complete with the source's digest.
func TestCloneIntoUploadPodBlock(t *testing.T) {
	needPods(t)
	dir := t.TempDir()
	img := testimg.Raw(t, dir, "src.img", 6<<20, 29)
	dev := testimg.LoopDevice(t, dir, 6<<20)
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	addr := freeAddr(t)
	server := startPod(t, uploadPod(t, ca, addr, map[string]string{"DESTINATION": "/dev/cdi-block-volume"},
		map[string]string{"/dev/cdi-block-volume": dev}))
	good := ca.Client(proxyName)
	c := mtlsClient(t, ca, &good)
	waitHealthy(t, c, "https://"+addr)
	res, err := cloner.Send(context.Background(), cloner.Options{URL: "https://" + addr + uploadserver.PathUpload,
		ContentType: cloner.ContentTypeBlock, Source: img, Client: c})
	require.NoError(t, err)
	assert.Equal(t, cloner.ProtocolSparseV2, res.Protocol)
	assert.Equal(t, 0, server.wait(t))
	m := decodeUploadPod(t, server.terminationLog(t))
	assert.Equal(t, uploadserver.MessageCloneComplete, m.Message)
	assert.True(t, m.Verified)
	assert.Equal(t, res.Digest, m.SourceDigest)
	assert.Equal(t, testimg.ContentDigest(t, img), m.SourceDigest)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dev, -1))
}

// TestUploadServerNeedsDestOrEnv: `importer upload-server` with neither DEST
// nor CDI's environment is a usage error, not a server writing /data.
func TestUploadServerNeedsDestOrEnv(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(nil), "upload-server")
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "DEST is required")
	code, _, stderr = runCLI(t, nil, env(map[string]string{"DESTINATION": "/nonexistent/disk.img"}), "upload-server")
	assert.Equal(t, cdi.ExitFailed, code, "CDI's env without a certificate")
	assert.Contains(t, stderr, "TLS_CERT_FILE and TLS_KEY_FILE are required")
}
