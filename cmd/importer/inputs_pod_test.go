package main

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testpki"
)

// The controller mounts each secret of extra headers at /extraheaders/<n>/,
// one header per key, besides IMPORTER_EXTRA_HEADER_<n>; the server gets
// them all.
func TestPodExtraHeaderSecrets(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 64)
	want := map[string]string{"X-Secret-Token": "s3cr3t", "X-Other": "two", "X-Env": "one"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range want {
			if r.Header.Get(k) != v {
				http.Error(w, "missing "+k, http.StatusForbidden)
				return
			}
		}
		http.ServeFile(w, r, raw)
	}))
	t.Cleanup(srv.Close)
	headers := t.TempDir()
	secretVolume(t, filepath.Join(headers, "0"), map[string]string{"token": "X-Secret-Token: s3cr3t\n"})
	secretVolume(t, filepath.Join(headers, "1"), map[string]string{"other": "X-Other: two"})
	log := importPodWrites(t, pod{
		env:     httpEnv(srv.URL+"/disk.raw", map[string]string{"IMPORTER_EXTRA_HEADER_0": "X-Env: one"}),
		volumes: map[string]string{"/extraheaders": headers},
	}, raw)
	assert.NotContains(t, string(log), "s3cr3t")
}

// An HTTPS server reached through an HTTPS proxy (https_proxy) that has a
// certificate of its own CA: the proxy's CA comes from
// IMPORTER_PROXY_CERT_DIR, the server's from IMPORTER_CERT_DIR under a
// ConfigMap key with no .crt or .pem in its name. Without the proxy's CA
// the import fails.
func TestPodProxyWithItsOwnCA(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 65)
	pki := t.TempDir()
	serverCA := testpki.NewCA(t, pki, "server")
	proxyCA := testpki.NewCA(t, pki, "proxy")
	backend := httptest.NewUnstartedServer(http.FileServer(http.Dir(dir)))
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{serverCA.Server("disk", "disk.test").TLS(t)}}
	backend.StartTLS()
	t.Cleanup(backend.Close)
	proxy := startConnectProxy(t, proxyCA.Server("proxy").TLS(t), backend.Listener.Addr().String())

	certs, proxyCerts := t.TempDir(), t.TempDir()
	configMapVolume(t, certs, map[string]string{"ca-bundle": string(serverCA.PEM)})
	configMapVolume(t, proxyCerts, map[string]string{"ca.pem": string(proxyCA.PEM)})
	env := httpEnv("https://disk.test/disk.raw", map[string]string{
		// The server is named, not 127.0.0.1: Go never proxies loopback.
		"https_proxy":             proxy.url,
		"IMPORTER_CERT_DIR":       "/certs",
		"IMPORTER_PROXY_CERT_DIR": "/proxycerts/",
	})

	importPodWrites(t, pod{env: env, volumes: map[string]string{"/certs": certs, "/proxycerts": proxyCerts}}, raw)
	assert.Contains(t, proxy.targets(), "disk.test:443", "the import went through the proxy")

	data := t.TempDir()
	code, log, _ := runPod(t, pod{env: env, volumes: map[string]string{"/data": data, "/certs": certs}})
	assert.Equal(t, cdi.ExitFailed, code, "without the proxy's CA its certificate is not trusted")
	assert.Contains(t, failureText(t, log), "certificate")
	assert.Empty(t, testimg.DirNames(t, data))
}

// importPodWrites runs p with a new directory mounted at /data, requires
// it to succeed and /data/disk.img to begin with the 1 MiB raw disk, and
// returns its termination log.
func importPodWrites(t *testing.T, p pod, raw string) []byte {
	t.Helper()
	data := t.TempDir()
	p.volumes["/data"] = data
	code, log, _ := runPod(t, p)
	require.Equal(t, cdi.ExitOK, code, "%s", log)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(data, "disk.img"), 1<<20))
	return log
}

// secretVolume lays out dir as Kubernetes mounts a secret or ConfigMap:
// the files in a hidden timestamped directory, "..data" linking to it,
// and each key a link through "..data".
func secretVolume(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	real := filepath.Join(dir, "..2026_12_01_09_00_00.123456789")
	require.NoError(t, os.MkdirAll(real, 0o755))
	require.NoError(t, os.Symlink(filepath.Base(real), filepath.Join(dir, "..data")))
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(real, name), []byte(content), 0o644))
		require.NoError(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
}

// configMapVolume is secretVolume for a ConfigMap (the same layout).
func configMapVolume(t *testing.T, dir string, files map[string]string) { secretVolume(t, dir, files) }

// connectProxy is an HTTPS proxy on 127.0.0.1 that answers CONNECT for
// any host by tunnelling to one backend address.
type connectProxy struct {
	url  string
	mu   sync.Mutex
	seen []string
}

func (p *connectProxy) targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func startConnectProxy(t *testing.T, cert tls.Certificate, backend string) *connectProxy {
	t.Helper()
	p := &connectProxy{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		p.mu.Lock()
		p.seen = append(p.seen, r.Host)
		p.mu.Unlock()
		up, err := net.Dial("tcp", backend)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.Close()
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			return
		}
		tunnel(conn, buf.Reader, up)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p.url = "https://" + srv.Listener.Addr().String()
	return p
}

// tunnel copies both ways until either side ends.
func tunnel(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, buffered); done <- struct{}{} }()
	go func() { io.Copy(client, up); done <- struct{}{} }()
	<-done
}

// IMPORTER_CERT_DIR alone: every non-hidden file is read for
// certificates, as CDI does, whatever the ConfigMap key is called.
func TestPodCertDirTrustsEveryFile(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 67)
	ca := testpki.NewCA(t, t.TempDir(), "server")
	srv := httptest.NewUnstartedServer(http.FileServer(http.Dir(dir)))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server("server").TLS(t)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	certs := t.TempDir()
	configMapVolume(t, certs, map[string]string{"ca-bundle": string(ca.PEM), "README": "not a certificate"})
	importPodWrites(t, pod{
		env:     httpEnv(srv.URL+"/disk.raw", map[string]string{"IMPORTER_CERT_DIR": "/certs"}),
		volumes: map[string]string{"/certs": certs},
	}, raw)
}
