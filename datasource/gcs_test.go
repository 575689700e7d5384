package datasource_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func gcsFixture(t *testing.T, data []byte) (*objtest.GCS, string) {
	t.Helper()
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("CLOUDSDK_CONFIG", t.TempDir()) // no gcloud credentials of this machine's
	t.Setenv("GCE_METADATA_HOST", "")
	g := objtest.StartGCS(t, "images")
	g.Upload(t, "images", "dir/disk.img", data)
	return g, "gs+" + g.URL + "/images/dir/disk.img"
}

var gcsConfig = datasource.Config{Access: datasource.Access{RetryBackoff: 10 * time.Millisecond}}

func TestGCSReadsObject(t *testing.T) {
	data := testImage(t, 3<<20)
	g, ep := gcsFixture(t, data)
	src, err := datasource.New(ep, gcsConfig)
	require.NoError(t, err)
	assert.Contains(t, src.String(), "gs://images/dir/disk.img")
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), st.Size)
	assert.Equal(t, sum(data), sum(got))
	require.NotNil(t, st.Ranges)
	assert.True(t, st.HTTPAnswer, "a GCS object is the body of an HTTP answer")

	ep2, err := datasource.GCSURL("gs://images/dir/disk.img", g.URL)
	require.NoError(t, err)
	assert.Equal(t, ep, ep2)
	// STORAGE_EMULATOR_HOST, as Google's clients read it.
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(g.URL, "http://"))
	src, err = datasource.New("gs://images/dir/disk.img", gcsConfig)
	require.NoError(t, err)
	requireContent(t, src, data)
}

func TestGCSRangedReads(t *testing.T) {
	data := testImage(t, 1<<20)
	g, ep := gcsFixture(t, data)
	src, err := datasource.New(ep, gcsConfig)
	require.NoError(t, err)
	rr := openRanged(t, src)
	p := make([]byte, 70000)
	n, err := rr.ReadAt(p, 98765)
	require.NoError(t, err)
	assert.Equal(t, data[98765:98765+n], p[:n])

	// Replaced (a new generation): the next ranged read fails.
	g.Upload(t, "images", "dir/disk.img", testImage(t, 1<<20))
	assertReplacedRefused(t, rr)
}

func TestGCSRefusals(t *testing.T) {
	g, _ := gcsFixture(t, testImage(t, 64<<10))
	for _, c := range []struct{ name, ep string }{
		{"missing object", "gs+" + g.URL + "/images/nope.img"},
		{"missing bucket", "gs+" + g.URL + "/nobucket/disk.img"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := datasource.New(c.ep, datasource.Config{Access: datasource.Access{RetryBackoff: time.Second}})
			require.NoError(t, err)
			_, err = src.Open(context.Background())
			var se *errdefs.HTTPStatusError
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Equal(t, 404, se.StatusCode)
			assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
			assert.Zero(t, retriesOf(src), "not retried")
		})
	}
}

// tokenEndpoint is an OAuth 2 token endpoint on 127.0.0.1: it counts the
// exchanges, answers one whose form grant accepts with the access token
// token, and any other with 400 invalid_grant, refusal its description.
func tokenEndpoint(t *testing.T, token, refusal string, grant func(*http.Request) bool) (*httptest.Server, *atomic.Int64) {
	var exchanges atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exchanges.Add(1)
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		if !grant(r) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": refusal})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "expires_in": 3600, "token_type": "Bearer"})
	}))
	t.Cleanup(srv.Close)
	return srv, &exchanges
}

// serviceAccount writes a service-account key file whose token_uri is
// tokenURL, with the key k.
func serviceAccount(t *testing.T, tokenURL string, k *rsa.PrivateKey) string {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "client_email": "importer@test.iam.gserviceaccount.com", "private_key_id": "k1",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": tokenURL,
	})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "credentials.json")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

// TestGCSServiceAccount: the key file's JWT is exchanged for a token at its
// token_uri (a small endpoint of the test: fake-gcs-server checks no
// tokens), the token goes with every request, and a refused key is a clear,
// unretried error.
func TestGCSServiceAccount(t *testing.T) {
	data := testImage(t, 256<<10)
	g, _ := gcsFixture(t, data)
	accept := atomic.Bool{}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	var tokenURL string
	tokenSrv, exchanges := tokenEndpoint(t, "tok-123", "Invalid JWT Signature.", func(r *http.Request) bool {
		return accept.Load() && validAssertion(t, r, &key.PublicKey, tokenURL)
	})
	tokenURL = tokenSrv.URL
	var sawToken atomic.Bool
	front := tokenCheckingFront(t, g, "tok-123", &sawToken)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", serviceAccount(t, tokenSrv.URL, key))

	src, err := datasource.New("gs+"+front.URL+"/images/dir/disk.img", datasource.Config{Access: datasource.Access{RetryBackoff: time.Second}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wrong credentials")
	assert.Contains(t, err.Error(), "invalid_grant")
	assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
	assert.Equal(t, int64(1), exchanges.Load(), "not retried")

	accept.Store(true)
	requireContent(t, src, data)
	assert.True(t, sawToken.Load(), "the access token was sent")
	_, _, err = readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, int64(2), exchanges.Load(), "the token is cached until it expires")
}

// tokenCheckingFront is a proxy hop in front of fake-gcs-server (which
// checks no tokens) that notes whether a request carried the access token.
func tokenCheckingFront(t *testing.T, g *objtest.GCS, token string, saw *atomic.Bool) *httptest.Server {
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+token {
			saw.Store(true)
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, g.URL+r.URL.RequestURI(), nil)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(front.Close)
	return front
}

// TestGCSAuthorizedUser: an authorized user's refresh token is exchanged at
// its token_uri for the access token that reaches the storage server; a
// revoked one is a clear, unretried refusal.
func TestGCSAuthorizedUser(t *testing.T) {
	data := testImage(t, 256<<10)
	g, _ := gcsFixture(t, data)
	revoked := atomic.Bool{}
	tokenSrv, exchanges := tokenEndpoint(t, "user-tok", "Token has been expired or revoked.", func(r *http.Request) bool {
		f := r.PostForm
		return !revoked.Load() && f.Get("grant_type") == "refresh_token" && f.Get("client_id") == "cid" &&
			f.Get("client_secret") == "csecret" && f.Get("refresh_token") == "rtoken"
	})
	var sawToken atomic.Bool
	front := tokenCheckingFront(t, g, "user-tok", &sawToken)
	b, err := json.Marshal(map[string]string{"type": "authorized_user", "client_id": "cid", "client_secret": "csecret",
		"refresh_token": "rtoken", "token_uri": tokenSrv.URL})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "adc.json")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", p)

	src, err := datasource.New("gs+"+front.URL+"/images/dir/disk.img", gcsConfig)
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.True(t, sawToken.Load(), "the access token was sent")
	assert.Equal(t, int64(1), exchanges.Load())

	revoked.Store(true)
	src, err = datasource.New("gs+"+front.URL+"/images/dir/disk.img", datasource.Config{Access: datasource.Access{RetryBackoff: time.Second}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
	assert.Contains(t, err.Error(), "wrong credentials (invalid_grant: Token has been expired or revoked.)")
	assert.NotContains(t, err.Error(), "csecret")
	assert.NotContains(t, err.Error(), "rtoken")
	assert.Equal(t, int64(2), exchanges.Load(), "not retried")
}

// TestGCSTokenRequestNotRedirected: the token request carries the key's
// signed assertion; a token endpoint that redirects is refused, and the
// redirect's target receives nothing.
func TestGCSTokenRequestNotRedirected(t *testing.T) {
	var elsewhere atomic.Int64
	other := testimg.ServerOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		_, _ = io.WriteString(w, `{"access_token":"stolen","expires_in":3600}`)
	}))
	tokenSrv := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/token", http.StatusTemporaryRedirect)
	}))
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", serviceAccount(t, tokenSrv.URL, key))
	src, err := datasource.New("gs+http://127.0.0.1:1/images/disk.img", gcsConfig)
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
	assert.Contains(t, err.Error(), "redirected")
	assert.Zero(t, elsewhere.Load(), "the redirect's target got the token request")
}

// TestGCSTokenRequestStopsWithTheImport: a token endpoint that never
// answers does not outlast the import's context. It answers only when the
// test ends, so the Open's return is itself the proof: no clock is read.
func TestGCSTokenRequestStopsWithTheImport(t *testing.T) {
	release := make(chan struct{})
	tokenSrv := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", serviceAccount(t, tokenSrv.URL, key))
	src, err := datasource.New("gs+http://127.0.0.1:1/images/disk.img", gcsConfig)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = src.Open(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// validAssertion checks a JWT-bearer token request: the grant type, and an
// RS256 assertion signed by pub for the read-only storage scope, addressed
// to the token endpoint.
func validAssertion(t *testing.T, r *http.Request, pub *rsa.PublicKey, aud string) bool {
	if r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		return false
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	h := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(pub, crypto.SHA256, h[:], sig) != nil {
		t.Errorf("the assertion's signature does not verify")
		return false
	}
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		Iss, Scope, Aud string
		Iat, Exp        int64
	}
	if json.Unmarshal(raw, &claims) != nil || claims.Iss != "importer@test.iam.gserviceaccount.com" ||
		claims.Scope != "https://www.googleapis.com/auth/devstorage.read_only" || claims.Aud != aud || claims.Exp-claims.Iat != 3600 {
		t.Errorf("unexpected claims %s", raw)
		return false
	}
	return true
}

func TestGCSEndpointForms(t *testing.T) {
	for _, bad := range []string{"gs://bucket", "gs://bucket/", "gs+https://host/bucket", "gs://b/k?x=1", "gs+https://u:p@host/b/k"} {
		_, err := datasource.New(bad, datasource.Config{})
		assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, bad)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "absent.json"))
	_, err := datasource.New("gs://b/k", datasource.Config{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.ErrorContains(t, err, "GOOGLE_APPLICATION_CREDENTIALS")
}
