package datasource_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// received is what a server was sent: the query and headers of every
// request.
type received struct {
	mu   sync.Mutex
	reqs []receivedRequest
}

type receivedRequest struct {
	uri    string // the request target as sent
	query  string
	header http.Header
}

func (rc *received) add(r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.reqs = append(rc.reqs, receivedRequest{uri: r.RequestURI, query: r.URL.RawQuery, header: r.Header.Clone()})
}

func (rc *received) all() []receivedRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]receivedRequest(nil), rc.reqs...)
}

// recordAndServe serves data, recording each request in rc.
func recordAndServe(rc *received, data []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rc.add(r)
		serveBytes(data)(w, r)
	}
}

// otherOrigins are where a redirect leads in the tests below: another host
// (what Go's client strips Authorization for), and another port of the same
// host (another origin, which credentials are scoped to as well).
var otherOrigins = []struct{ name, host string }{
	{"another host", "127.0.0.2"},
	{"another port", "127.0.0.1"},
}

// streamAndRange reads src's stream and one range of it, checking both
// against data: a redirected object is read at random at the redirected URL.
func streamAndRange(t *testing.T, src datasource.Source, data []byte) {
	t.Helper()
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))
	require.NotNil(t, st.Ranges)
	rr, err := st.Ranges.Open(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { rr.Close() })
	buf := make([]byte, 32<<10)
	_, err = rr.ReadAt(buf, 8192)
	require.NoError(t, err)
	assert.Equal(t, data[8192:8192+len(buf)], buf)
}

func TestHTTPRedirectSendsNoReferer(t *testing.T) {
	data := testImage(t, 128<<10)
	var hop, blob received
	other := testimg.ServerOn(t, "127.0.0.2", recordAndServe(&blob, data))
	mux := http.NewServeMux()
	mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/hop", http.StatusFound)
	})
	mux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) {
		hop.add(r)
		http.Redirect(w, r, other.URL+"/blob", http.StatusFound)
	})
	front := testimg.ServerOn(t, "127.0.0.1", mux)
	// A pre-signed URL: its query is the credential.
	src, err := datasource.NewHTTP(front.URL+"/img?X-Amz-Signature=5ec7e7516&token=t0ken5ecre7", datasource.Config{})
	require.NoError(t, err)
	streamAndRange(t, src, data)

	got := append(hop.all(), blob.all()...)
	require.GreaterOrEqual(t, len(got), 3, "the same-origin hop, the redirected stream and a range read")
	for i, r := range got {
		assert.Empty(t, r.header.Values("Referer"), "request %d", i)
	}
}

func TestGCSTokenStaysWithItsOrigin(t *testing.T) {
	const token = "ya29.access-t0ken-5ecre7"
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tokenSrv := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"access_token":"`+token+`","expires_in":3600,"token_type":"Bearer"}`)
	}))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", serviceAccount(t, tokenSrv.URL, key))
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	data := testImage(t, 128<<10)
	for _, o := range otherOrigins {
		t.Run(o.name, func(t *testing.T) {
			var front, blob received
			other := testimg.ServerOn(t, o.host, recordAndServe(&blob, data))
			entry := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				front.add(r)
				if r.Header.Get("Authorization") != "Bearer "+token {
					http.Error(w, "token required", http.StatusUnauthorized)
					return
				}
				http.Redirect(w, r, other.URL+"/blob?alt=media", http.StatusTemporaryRedirect)
			}))
			src, err := datasource.New("gs+"+entry.URL+"/images/disk.img", gcsConfig)
			require.NoError(t, err)
			streamAndRange(t, src, data)

			require.NotEmpty(t, front.all())
			got := blob.all()
			require.GreaterOrEqual(t, len(got), 2, "the redirected stream and a range read")
			for i, r := range got {
				assert.Empty(t, r.header.Values("Authorization"), "request %d to %s", i, other.URL)
				assertNoSecret(t, r, token)
			}
		})
	}
}

func TestS3RedirectToAnotherOriginIsUnsigned(t *testing.T) {
	const id, secret, session = "AKIDSECRETKEYID0001", "s3cretAccessKey0001", "5ess10nT0ken0001"
	t.Setenv("AWS_ACCESS_KEY_ID", id)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", session)
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	data := testImage(t, 128<<10)
	for _, o := range otherOrigins {
		t.Run(o.name, func(t *testing.T) {
			var front, blob received
			other := testimg.ServerOn(t, o.host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/denied" {
					http.Error(w, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>", http.StatusForbidden)
					return
				}
				recordAndServe(&blob, data)(w, r)
			}))
			entry := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				front.add(r)
				if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="+id+"/") {
					http.Error(w, "signature required", http.StatusForbidden)
					return
				}
				if r.URL.Path == "/images/denied.img" {
					http.Redirect(w, r, other.URL+"/denied", http.StatusTemporaryRedirect)
					return
				}
				// A path S3 would encode otherwise ('+', '='): sent as given.
				http.Redirect(w, r, other.URL+"/blob/a+b=c?part=1", http.StatusTemporaryRedirect)
			}))
			src, err := datasource.New("s3+"+entry.URL+"/images/disk.img", datasource.Config{})
			require.NoError(t, err)
			streamAndRange(t, src, data)

			// The endpoint's own host got the signed request.
			first := front.all()
			require.NotEmpty(t, first)
			assert.Equal(t, session, first[0].header.Get("X-Amz-Security-Token"))
			assert.Empty(t, first[0].query)

			got := blob.all()
			require.GreaterOrEqual(t, len(got), 2, "the redirected stream and a range read")
			for i, r := range got {
				assert.Empty(t, r.header.Values("Authorization"), "request %d to %s", i, other.URL)
				for k := range r.header {
					assert.False(t, strings.HasPrefix(strings.ToLower(k), "x-amz-"), "request %d carries %s", i, k)
				}
				assert.Equal(t, "part=1", r.query, "only the redirect's own query")
				assert.Equal(t, "/blob/a+b=c?part=1", r.uri, "the redirect's URL as given")
				assertNoSecret(t, r, id, secret, session, "Signature=")
			}

			// Refused there: the error says the request went unsigned.
			src, err = datasource.New("s3+"+entry.URL+"/images/denied.img", datasource.Config{})
			require.NoError(t, err)
			_, err = src.Open(t.Context())
			require.ErrorIs(t, err, errdefs.ErrSourceRefused)
			assert.Contains(t, err.Error(), "access denied")
			assert.Contains(t, err.Error(), "sent unsigned to "+other.URL)
		})
	}
}

// assertNoSecret checks that no header value or query of r holds any of
// secrets.
func assertNoSecret(t *testing.T, r receivedRequest, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		assert.NotContains(t, r.query, s)
		for k, vs := range r.header {
			for _, v := range vs {
				assert.NotContains(t, v, s, "header %s", k)
			}
		}
	}
}

// redirectPair starts the image on one server and, on another port of
// 127.0.0.1 (another origin), a server that requires the extra header and
// redirects to the first. rec holds what the image server received.
func redirectPair(t *testing.T, data []byte, rec *seen) (entry string) {
	t.Helper()
	blob := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		serveBytes(data)(w, r)
	}))
	front := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth-Token") != "s3cr3t" {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, blob.URL+"/blob", http.StatusFound)
	}))
	return front.URL + "/img"
}

func TestHTTPRedirectOtherOriginDropsExtraHeaders(t *testing.T) {
	data := testImage(t, 300<<10)
	var rec seen
	entry := redirectPair(t, data, &rec)
	var logs bytes.Buffer
	src, err := datasource.NewHTTP(entry, datasource.Config{
		Access: datasource.Access{
			Headers: []string{"X-Auth-Token: s3cr3t", "X-Tenant: blue", "Authorization: Bearer tok"},
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)

	// The stream (one GET, redirected).
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))

	// And the range reads, which go straight to the redirected URL.
	require.NotNil(t, st.Ranges, "image server serves ranges")
	rr, err := st.Ranges.Open(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { rr.Close() })
	buf := make([]byte, 64<<10)
	_, err = rr.ReadAt(buf, 4096)
	require.NoError(t, err)
	assert.Equal(t, data[4096:4096+len(buf)], buf)

	hdrs := rec.all()
	require.GreaterOrEqual(t, len(hdrs), 2, "the stream GET and a range GET")
	for i, h := range hdrs {
		for _, name := range []string{"X-Auth-Token", "X-Tenant", "Authorization"} {
			assert.Empty(t, h.Get(name), "request %d to the other origin carries %s", i, name)
		}
		assert.Equal(t, "diskimport-engine", h.Get("User-Agent"), "request %d", i)
	}
	assert.Contains(t, logs.String(), "not sending credentials or extra headers")
	assert.NotContains(t, logs.String(), "s3cr3t", "header values must not be logged")
}

func TestHTTPRedirectSameOriginKeepsExtraHeaders(t *testing.T) {
	data := testImage(t, 100<<10)
	var rec seen
	mux := http.NewServeMux()
	mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/blob", http.StatusFound)
	})
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		serveBytes(data)(w, r)
	})
	srv := newServer(t, mux)
	src, err := datasource.NewHTTP(srv.URL+"/img", datasource.Config{Access: datasource.Access{Headers: []string{"X-Auth-Token: s3cr3t"}}})
	require.NoError(t, err)
	requireContent(t, src, data)
	hdrs := rec.all()
	require.Len(t, hdrs, 1)
	assert.Equal(t, "s3cr3t", hdrs[0].Get("X-Auth-Token"))
	assert.False(t, strings.Contains(hdrs[0].Get("X-Auth-Token"), ","), "header sent once")
}
