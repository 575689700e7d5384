package main

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// seenHeaders records the headers of every request a test server got.
type seenHeaders struct {
	mu   sync.Mutex
	reqs []http.Header
}

func (s *seenHeaders) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r.Header.Clone())
}

func (s *seenHeaders) all() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.reqs...)
}

// acceptingUploadServer answers HEAD 200 and takes a POST's body whole,
// recording the bytes; it answers 200.
func acceptingUploadServer(t *testing.T, host string, seen *seenHeaders, got *[]byte) *httptest.Server {
	var mu sync.Mutex
	return testimg.ServerOn(t, host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		if r.Method != http.MethodPost {
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		*got = b
		mu.Unlock()
	}))
}

// TestUploadClientRedirectCarriesNoCredentialsElsewhere: the upload
// server answers HEAD with a redirect within its origin, then to another
// port of the same host or to another host; the server there sees neither
// the bearer token nor the --header values nor the URL's user:password
// (Go's client sends the token to another port, and every --header
// anywhere), while the redirect within the origin keeps them; the upload
// itself still reaches its server whole. Before the upload client used
// the import sources' rule, the other port got Authorization and
// X-Secret, the other host X-Secret (checked).
func TestUploadClientRedirectCarriesNoCredentialsElsewhere(t *testing.T) {
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 61)
	want, err := os.ReadFile(raw)
	require.NoError(t, err)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:pa55word"))
	for _, creds := range []struct {
		name    string
		flags   []string
		auth    string
		xSecret string
	}{
		{"token and --header", []string{"--token", "s3cret", "--header", "X-Secret: hush"}, "Bearer s3cret", "hush"},
		{"URL password", nil, basic, ""},
	} {
		for _, other := range []struct{ name, host string }{{"another port", "127.0.0.1"}, {"another host", "127.0.0.2"}} {
			t.Run(creds.name+"/"+other.name, func(t *testing.T) {
				var elsewhere, home seenHeaders
				var got []byte
				dst := acceptingUploadServer(t, other.host, &elsewhere, new([]byte))
				var srv *httptest.Server
				srv = testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					home.add(r)
					switch {
					case r.Method == http.MethodHead && r.URL.Path == uploadserver.PathUpload:
						http.Redirect(w, r, srv.URL+"/same-origin", http.StatusTemporaryRedirect)
					case r.Method == http.MethodHead:
						http.Redirect(w, r, dst.URL+uploadserver.PathUpload, http.StatusTemporaryRedirect)
					case r.Method == http.MethodPost:
						got, _ = io.ReadAll(r.Body)
					}
				}))
				u := strings.Replace(srv.URL, "http://", "http://user:pa55word@", 1)
				args := append(append([]string{"upload", "-v"}, creds.flags...), raw, u)
				code, _, stderr := runCLI(t, nil, env(nil), args...)
				require.Equal(t, cdi.ExitOK, code, stderr)
				assert.Equal(t, want, got, "the upload reached its server whole")
				reqs := elsewhere.all()
				require.Len(t, reqs, 1, "the redirected HEAD")
				for k, v := range reqs[0] {
					for _, s := range v {
						assert.NotContains(t, s, "s3cret", k)
						assert.NotContains(t, s, "hush", k)
					}
				}
				assert.Empty(t, reqs[0].Get("Authorization"))
				assert.Empty(t, reqs[0].Get("X-Secret"))
				homeReqs := home.all()
				require.Len(t, homeReqs, 3, "HEAD, its redirect within the origin, POST")
				for i, h := range homeReqs {
					assert.Equal(t, creds.auth, h.Get("Authorization"), i)
					assert.Equal(t, creds.xSecret, h.Get("X-Secret"), i)
				}
				assert.Contains(t, stderr, "redirected to another origin, not sending credentials or extra headers")
			})
		}
	}
}

// TestUploadClientRefusesAnUploadRedirectedIntoAGet: a server that
// answers the POST with 302 to a page that answers 200 has not received
// the image: the upload fails, never "Upload complete". Before the check,
// Go's client turned the POST into a GET and the command exited 0
// (checked).
func TestUploadClientRefusesAnUploadRedirectedIntoAGet(t *testing.T) {
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 62)
	var srv *httptest.Server
	srv = testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			http.Redirect(w, r, srv.URL+"/thanks", http.StatusFound)
		}
	}))
	code, _, stderr := runCLI(t, nil, env(nil), "upload", raw, srv.URL)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "the server redirected the upload to "+srv.URL+"/thanks as a GET: the image was not sent there")
	assert.NotContains(t, stderr, "Upload complete")
}

// hangingServer runs h on 127.0.0.1; h may block on release, which is
// closed before the server is, at the test's end.
func hangingServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, release <-chan struct{})) *httptest.Server {
	release := make(chan struct{})
	srv := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, release) }))
	t.Cleanup(func() { close(release) }) // runs before ServerOn's Close
	return srv
}

// runBounded runs the CLI and fails the test when it has not exited
// within limit: a request without a bound hangs it.
func runBounded(t *testing.T, limit time.Duration, args ...string) (int, string) {
	t.Helper()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		var out, errb strings.Builder
		code := run(ctx, args, strings.NewReader(""), &out, &errb, env(nil))
		done <- result{code, errb.String()}
	}()
	select {
	case r := <-done:
		t.Logf("importer %s → %d\nstderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
		return r.code, r.stderr
	case <-time.After(limit):
		cancel()
		r := <-done
		t.Fatalf("importer %s still running after %s (stderr so far:\n%s)", strings.Join(args, " "), limit, r.stderr)
		return 0, ""
	}
}

// TestUploadClientBoundsEveryRequest: hostile servers on 127.0.0.1 that
// never answer the HEAD, never read the body (of 256 MiB, past what the
// sockets buffer), send half an answer and stop, or never answer a status
// request under --async (with --wait, and without it): each upload fails
// within its bound, naming what did not happen, where before the fix the
// command hung (checked: the test's 20 s limit, the flag then unknown).
func TestUploadClientBoundsEveryRequest(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.raw")
	require.NoError(t, os.WriteFile(big, nil, 0o644))
	require.NoError(t, os.Truncate(big, 256<<20))
	small := testimg.Raw(t, t.TempDir(), "small.raw", 64<<10, 63)
	block := func(r *http.Request, release <-chan struct{}) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	for _, c := range []struct {
		name  string
		file  string
		flags []string
		h     func(w http.ResponseWriter, r *http.Request, release <-chan struct{})
		want  string
	}{
		{"HEAD never answered", small, nil, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			block(r, release)
		}, "HEAD %s" + uploadserver.PathUpload + ": no answer within --stall-timeout 300ms"},
		{"body never read", big, nil, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			if r.Method == http.MethodPost {
				block(r, release)
			}
		}, "POST %s" + uploadserver.PathUpload + ": the server took no byte of the upload for --stall-timeout 300ms: the import did not complete"},
		{"answer cut short", small, nil, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			if r.Method == http.MethodPost {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Length", "100")
				_, _ = w.Write([]byte(`{"message":`))
				w.(http.Flusher).Flush()
				block(r, release)
			}
		}, "reading the server's answer: POST %s" + uploadserver.PathUpload + ": the server's answer stopped arriving for --stall-timeout 300ms"},
		{"status never answered, --wait", small, []string{"--async", "--wait", "1s", "--stall-timeout", "1m"}, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			if r.URL.Path == uploadserver.PathStatus {
				block(r, release)
			}
		}, "the import did not end within --wait 1s (last status: phase none read; the status request at %s" + uploadserver.PathStatus + " was not answered)"},
		{"status never answered", small, []string{"--async"}, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			if r.URL.Path == uploadserver.PathStatus {
				block(r, release)
			}
		}, "reading the status at %s" + uploadserver.PathStatus + ": no answer within --stall-timeout 300ms"},
		{"no answer after the last byte, --wait", small, []string{"--wait", "500ms", "--stall-timeout", "1m"}, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			if r.Method == http.MethodPost {
				_, _ = io.Copy(io.Discard, r.Body)
				block(r, release)
			}
		}, "POST %s" + uploadserver.PathUpload + ": every byte was sent and the server did not answer within --wait 500ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := hangingServer(t, c.h)
			args := append([]string{"upload", "--stall-timeout", "300ms"}, c.flags...)
			code, stderr := runBounded(t, 20*time.Second, append(args, c.file, srv.URL)...)
			assert.Equal(t, cdi.ExitFailed, code)
			assert.Contains(t, stderr, strings.ReplaceAll(c.want, "%s", srv.URL))
			assert.NotContains(t, stderr, "Upload complete")
		})
	}
}
