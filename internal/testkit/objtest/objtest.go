// Package objtest starts real object-storage servers on 127.0.0.1 for
// tests, as child processes: versitygw (S3, posix backend) and
// fake-gcs-server (GCS). It also has a TCP proxy that breaks a connection
// mid-transfer. Every process and listener is stopped by t.Cleanup.
package objtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Binary finds a tool installed with go install ($(go env GOPATH)/bin, or
// $HOME/go/bin, or PATH); it skips the test with a clear reason when it
// is absent.
func Binary(t testing.TB, name, install string) string {
	t.Helper()
	var dirs []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		dirs = append(dirs, filepath.Join(filepath.SplitList(gp)[0], "bin"))
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		dirs = append(dirs, filepath.Join(string(bytes.TrimSpace(out)), "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Skipf("%s is not installed (go install %s; .ci/run does)", name, install)
	return ""
}

// freePort reserves a loopback port and releases it for a child to take.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// start runs a server process until the test ends and waits until addr
// accepts connections.
func start(t testing.TB, addr string, name string, args ...string) {
	t.Helper()
	startEnv(t, addr, nil, name, args...)
}

// startEnv is start with variables added to the test's environment.
func startEnv(t testing.TB, addr string, env []string, name string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(name), out.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("%s exited before listening on %s:\n%s", name, addr, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s after 20s:\n%s", name, addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// S3 is a running versitygw.
type S3 struct {
	URL            string // http://127.0.0.1:port
	Access, Secret string
	Root           string // the posix backend's directory: one directory per bucket
	client         *http.Client
}

// StartS3 starts versitygw with its posix backend over a test directory.
func StartS3(t testing.TB) *S3 { return startS3(t, "", "", nil) }

// StartS3TLS starts versitygw serving https with the certificate and key
// files given (issued for 127.0.0.1); pool trusts them, for the test's own
// requests.
func StartS3TLS(t testing.TB, certFile, keyFile string, pool *x509.CertPool) *S3 {
	return startS3(t, certFile, keyFile, pool)
}

func startS3(t testing.TB, certFile, keyFile string, pool *x509.CertPool) *S3 {
	t.Helper()
	bin := Binary(t, "versitygw", "github.com/versity/versitygw/cmd/versitygw@v1.8.0")
	root := t.TempDir()
	side := t.TempDir()
	addr := freePort(t)
	s := &S3{URL: "http://" + addr, Access: "testaccess", Secret: "testsecret0123456789", Root: root, client: http.DefaultClient}
	args := []string{"--access", s.Access, "--secret", s.Secret, "--port", addr}
	if certFile != "" {
		s.URL = "https://" + addr
		args = append(args, "--cert", certFile, "--key", keyFile)
		s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	start(t, addr, bin, append(args, "posix", "--sidecar", side, root)...)
	return s
}

func (s *S3) do(t interface {
	Helper()
	Fatalf(string, ...any)
}, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%v", err)
	}
	sum := sha256.Sum256(body)
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	s.Sign(req)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// GCS is a running fake-gcs-server.
type GCS struct {
	URL  string // http://127.0.0.1:port
	Root string // its filesystem backend: one directory per bucket
}

// StartGCS starts fake-gcs-server over a filesystem backend holding the
// given buckets (made empty).
func StartGCS(t testing.TB, buckets ...string) *GCS {
	t.Helper()
	bin := Binary(t, "fake-gcs-server", "github.com/fsouza/fake-gcs-server@v1.56.1")
	root := t.TempDir()
	data := t.TempDir()
	for _, b := range buckets {
		if err := os.Mkdir(filepath.Join(data, b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	addr := freePort(t)
	host, port, _ := net.SplitHostPort(addr)
	g := &GCS{URL: "http://" + addr, Root: root}
	start(t, addr, bin, "-scheme", "http", "-host", host, "-port", port, "-backend", "filesystem",
		"-filesystem-root", root, "-data", data, "-public-host", addr, "-external-url", g.URL, "-log-level", "warn")
	return g
}

// Upload stores an object through the JSON API's media upload.
func (g *GCS) Upload(t testing.TB, bucket, name string, data []byte) {
	t.Helper()
	u := fmt.Sprintf("%s/upload/storage/v1/b/%s/o?uploadType=media&name=%s", g.URL, bucket, urlQueryEscape(name))
	resp, err := http.Post(u, "application/octet-stream", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("uploading gs://%s/%s: %s %s", bucket, name, resp.Status, b)
	}
}

func urlQueryEscape(s string) string {
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Proxy forwards TCP connections to a backend. The first connection that
// carries more than DropAfter bytes towards the client is cut there; before
// it is cut, OnDrop runs (to replace an object, say). OnConn, when set,
// runs before the n-th connection (from 1) is forwarded.
type Proxy struct {
	Addr      string
	DropAfter int64
	OnDrop    func()
	OnConn    func(n int)
	Drops     atomic.Int64
	conns     atomic.Int64
	dropped   atomic.Bool
	backend   string
	l         net.Listener
	wg        sync.WaitGroup
}

// StartProxy listens on 127.0.0.1 in front of backend (host:port); p's
// DropAfter, OnDrop and OnConn must be set before the first connection.
func StartProxy(t testing.TB, backend string, p *Proxy) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.l, p.backend, p.Addr = l, backend, l.Addr().String()
	var live sync.Map
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			live.Store(c, true)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer live.Delete(c)
				p.serve(c, &live)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		live.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		p.wg.Wait()
	})
	return p
}

func (p *Proxy) serve(c net.Conn, live *sync.Map) {
	defer c.Close()
	n := int(p.conns.Add(1))
	if p.OnConn != nil {
		p.OnConn(n)
	}
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	live.Store(b, true)
	defer live.Delete(b)
	defer b.Close()
	go func() { _, _ = io.Copy(b, c); b.Close() }()
	var sent int64
	buf := make([]byte, 32<<10)
	for {
		k, err := b.Read(buf)
		if k > 0 {
			if p.DropAfter > 0 && !p.dropped.Load() && sent+int64(k) > p.DropAfter {
				if p.dropped.CompareAndSwap(false, true) {
					_, _ = c.Write(buf[:p.DropAfter-sent])
					if p.OnDrop != nil {
						p.OnDrop()
					}
					p.Drops.Add(1)
					return
				}
			}
			if _, werr := c.Write(buf[:k]); werr != nil {
				return
			}
			sent += int64(k)
		}
		if err != nil {
			return
		}
	}
}
