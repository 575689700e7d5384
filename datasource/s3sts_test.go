package datasource_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// stsAudience is the audience MinIO's STS wants web identity tokens for
// (its OpenID client id), as AWS wants sts.amazonaws.com.
const stsAudience = "sts.importer.test"

// stsFixture is MinIO with an OpenID issuer, a bucket "images" holding
// disk.img, and a proxy in front of its STS that records the token of
// every AssumeRoleWithWebIdentity.
type stsFixture struct {
	oidc  *objtest.OIDC
	minio *objtest.MinIO
	sts   string // the recording proxy: AWS_ENDPOINT_URL_STS
	ep    string // the object
	mu    sync.Mutex
	seen  []string // the tokens exchanged, in order
}

func startSTS(t *testing.T, data []byte) *stsFixture {
	f := &stsFixture{oidc: objtest.StartOIDC(t)}
	f.minio = objtest.StartMinIO(t, f.oidc, stsAudience)
	f.minio.MakeBucket(t, "images")
	f.minio.Put(t, "images", "disk.img", data)
	f.ep = "s3+" + f.minio.URL + "/images/disk.img"
	target, err := url.Parse(f.minio.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		if form.Get("Action") == "AssumeRoleWithWebIdentity" {
			f.mu.Lock()
			f.seen = append(f.seen, form.Get("WebIdentityToken"))
			f.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	f.sts = front.URL
	return f
}

func (f *stsFixture) exchanged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// useToken points the web identity variables at a token file holding tok.
func useToken(t *testing.T, f *stsFixture, tok string) string {
	clearAWSEnv(t)
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(tok), 0o600))
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", file)
	t.Setenv("AWS_ENDPOINT_URL_STS", f.sts)
	return file
}

// TestS3WebIdentityRealSTS: a projected-token-like JWT from an OpenID
// issuer is exchanged with MinIO's STS (which checks its signature against
// the issuer's JWKS, its expiry and its audience) for credentials that read
// the object byte for byte, with no key anywhere; a token that is expired,
// signed by another key or for another audience is refused by the STS, and
// the open fails at once with the STS's reason.
func TestS3WebIdentityRealSTS(t *testing.T) {
	data := testImage(t, 1<<20)
	f := startSTS(t, data)
	good := f.oidc.Token(t, objtest.TokenOptions{Audience: stsAudience, Claims: map[string]any{"policy": "readonly"}})
	useToken(t, f, good)
	src, err := datasource.New(f.ep, datasource.Config{})
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.Equal(t, []string{good}, f.exchanged())

	for _, c := range []struct {
		name string
		opt  objtest.TokenOptions
		want string // in the STS's reason
	}{
		{"expired", objtest.TokenOptions{Audience: stsAudience, Lifetime: -time.Minute, Claims: map[string]any{"policy": "readonly"}}, "Token is expired"},
		{"signed by another key", objtest.TokenOptions{Audience: stsAudience, ForeignKey: true, Claims: map[string]any{"policy": "readonly"}}, "verification error"},
		{"for another audience", objtest.TokenOptions{Audience: "sts.amazonaws.com", Claims: map[string]any{"policy": "readonly"}}, "must match configured OpenID Client ID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := f.oidc.Token(t, c.opt)
			useToken(t, f, tok)
			src, err := datasource.New(f.ep, datasource.Config{Access: datasource.Access{RetryBackoff: time.Second}})
			require.NoError(t, err)
			before := len(f.exchanged())
			_, err = src.Open(context.Background())
			require.Error(t, err)
			t.Logf("%s: %v", c.name, err)
			assert.Len(t, f.exchanged(), before+1, "a refusal is not retried")
			assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
			assert.Contains(t, err.Error(), "S3 web identity credentials (AWS_WEB_IDENTITY_TOKEN_FILE) from STS "+f.sts+" refused")
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), tok)
			assert.Equal(t, tok, f.exchanged()[len(f.exchanged())-1])
		})
	}
}

// TestS3WebIdentityTokenRotatesDuringImport: the token lives 12 s and the
// STS's credentials expire with it; the object is read slowly for longer
// than that while the token file is rewritten with a fresh token every
// 4 s (as the kubelet rotates a projected token). The credentials are
// exchanged again before they expire, each time with the token the file
// holds then, and the read completes byte for byte. Without the rotation
// the same read fails once the token expired, saying so.
func TestS3WebIdentityTokenRotatesDuringImport(t *testing.T) {
	if testing.Short() {
		t.Skip("reads for about 40 s")
	}
	data := testImage(t, 2<<20)
	f := startSTS(t, data)
	const lifetime = 12 * time.Second
	token := func() string {
		return f.oidc.Token(t, objtest.TokenOptions{Audience: stsAudience, Lifetime: lifetime, Claims: map[string]any{"policy": "readonly"}})
	}
	// slowRead reads the object in 64 KiB chunks for about d.
	slowRead := func(d time.Duration) ([]byte, error) {
		src, err := datasource.New(f.ep, datasource.Config{ChunkSize: 64 << 10, Access: datasource.Access{Connections: 2, RetryBackoff: 10 * time.Millisecond}})
		require.NoError(t, err)
		st, err := src.Open(context.Background())
		if err != nil {
			return nil, err
		}
		defer st.Body.Close()
		var out bytes.Buffer
		pause := d / time.Duration(len(data)/(64<<10))
		for {
			_, err := io.CopyN(&out, st.Body, 64<<10)
			if err == io.EOF {
				return out.Bytes(), nil
			}
			if err != nil {
				return out.Bytes(), err
			}
			time.Sleep(pause)
		}
	}

	t.Run("rotated", func(t *testing.T) {
		file := useToken(t, f, token())
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(4 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					tmp := file + ".new"
					_ = os.WriteFile(tmp, []byte(token()), 0o600)
					_ = os.Rename(tmp, file) // atomically, as the kubelet swaps it
				}
			}
		}()
		before := len(f.exchanged())
		got, err := slowRead(2 * lifetime)
		close(stop)
		<-done
		require.NoError(t, err)
		assert.Equal(t, sum(data), sum(got))
		ex := f.exchanged()[before:]
		assert.GreaterOrEqual(t, len(ex), 3, "exchanged again before each expiry")
		for i := 1; i < len(ex); i++ {
			assert.NotEqual(t, ex[i-1], ex[i], "every exchange sends the token the file holds then")
		}
		t.Logf("%d exchanges over a read of %s", len(ex), 2*lifetime)
	})
	t.Run("not rotated", func(t *testing.T) {
		useToken(t, f, token())
		_, err := slowRead(2 * lifetime)
		require.Error(t, err)
		t.Logf("%v", err)
		assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
		// Credentials MinIO no longer knows are fetched again, and the
		// STS refuses the expired token; or, when the token expires
		// between that exchange and the request, the request signed
		// with the fresh credentials is refused and says so.
		assert.Regexp(t, `S3 web identity credentials \(AWS_WEB_IDENTITY_TOKEN_FILE\) from STS \S+ refused: .*expired|signed with S3 web identity credentials .* fetched again after a first refusal`, err.Error())
	})
}
