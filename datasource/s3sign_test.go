package datasource

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// TestS3SignV4Shape: the signer covers the headers that pin a read (the
// range and If-Match) and the payload hash; the real-server tests
// (TestS3ReadsObject and the others, against versitygw) check that the signature is accepted.
func TestS3SignV4Shape(t *testing.T) {
	r, err := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com/test.txt", nil)
	require.NoError(t, err)
	r.Header.Set("Range", "bytes=0-9")
	r.Header.Set("If-Match", `"abc"`)
	r = signV4(r, awsCreds{id: "AKIAIOSFODNN7EXAMPLE", secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}, "eu-west-1")
	auth := r.Header.Get("Authorization")
	day := time.Now().UTC().Format("20060102")
	assert.True(t, strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/"+day+"/eu-west-1/s3/aws4_request, "), auth)
	for _, h := range []string{"host", "if-match", "range", "x-amz-content-sha256", "x-amz-date"} {
		assert.Regexp(t, `SignedHeaders=([a-z0-9-]+;)*`+h+`[;,]`, auth)
	}
	assert.Equal(t, emptySHA256, r.Header.Get("X-Amz-Content-Sha256"))

	unsigned, err := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com/test.txt", nil)
	require.NoError(t, err)
	assert.Empty(t, signV4(unsigned, awsCreds{}, "us-east-1").Header.Get("Authorization"))
}

func TestS3Escape(t *testing.T) {
	assert.Equal(t, "/b/a%20b/%21%2A%28%29%3F%23%25/~x_y-z.img", s3Escape("/b/a b/!*()?#%/~x_y-z.img"))
}

func TestS3CredentialsAndRegion(t *testing.T) {
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".aws"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".aws", "credentials"), []byte(
		"[default]\naws_access_key_id = DEFID\naws_secret_access_key = defsecret\n\n[prod]\naws_access_key_id=PRODID\naws_secret_access_key=prodsecret\naws_session_token=tok\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".aws", "config"), []byte(
		"[default]\nregion = eu-west-1\n[profile prod]\nregion=ap-south-1\n[profile caps]\nRegion = sa-east-1\n"), 0o600))
	env := func(m map[string]string) func(string) string {
		return func(k string) string {
			if k == "HOME" {
				return home
			}
			return m[k]
		}
	}
	static := func(c *s3Credentials, err error) awsCreds {
		t.Helper()
		require.NoError(t, err)
		require.Nil(t, c.creds, "static keys")
		return c.static
	}
	assert.Equal(t, awsCreds{id: "U", secret: "P"}, static(awsCredentials(Config{Access: Access{Username: "U", Password: "P"}}, env(map[string]string{"AWS_ACCESS_KEY_ID": "E"}))),
		"the Config's (CDI's) keys win")
	assert.Equal(t, awsCreds{id: "E", secret: "S", token: "T"}, static(awsCredentials(Config{}, env(map[string]string{"AWS_ACCESS_KEY_ID": "E", "AWS_SECRET_ACCESS_KEY": "S", "AWS_SESSION_TOKEN": "T"}))))
	assert.Equal(t, awsCreds{id: "DEFID", secret: "defsecret"}, static(awsCredentials(Config{}, env(nil))))
	assert.Equal(t, awsCreds{id: "PRODID", secret: "prodsecret", token: "tok"}, static(awsCredentials(Config{}, env(map[string]string{"AWS_PROFILE": "prod"}))))
	_, err := awsCredentials(Config{}, env(map[string]string{"AWS_PROFILE": "staging"}))
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, "a profile asked for and absent")
	assert.ErrorContains(t, err, "no profile staging")
	_, err = awsCredentials(Config{Access: Access{Username: "U"}}, env(nil))
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	_, err = awsCredentials(Config{}, env(map[string]string{"AWS_ACCESS_KEY_ID": "E"}))
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	c, err := awsCredentials(Config{}, func(string) string { return "" })
	require.NoError(t, err)
	assert.False(t, c.signs(), "nothing anywhere: unsigned")
	// Key names in upper case, as the AWS CLI takes them.
	upper := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(upper, []byte("[default]\nAWS_ACCESS_KEY_ID = UPID\nAWS_SECRET_ACCESS_KEY = upsecret\n"), 0o600))
	assert.Equal(t, awsCreds{id: "UPID", secret: "upsecret"}, static(awsCredentials(Config{}, env(map[string]string{"AWS_SHARED_CREDENTIALS_FILE": upper}))))
	// A file without [default] (only other profiles) is no credentials.
	other := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(other, []byte("[ci]\naws_access_key_id=X\naws_secret_access_key=Y\n"), 0o600))
	c, err = awsCredentials(Config{}, env(map[string]string{"AWS_SHARED_CREDENTIALS_FILE": other}))
	require.NoError(t, err)
	assert.False(t, c.signs())

	assert.Equal(t, "eu-west-1", awsRegion(env(nil)))
	assert.Equal(t, "ap-south-1", awsRegion(env(map[string]string{"AWS_PROFILE": "prod"})))
	assert.Equal(t, "sa-east-1", awsRegion(env(map[string]string{"AWS_PROFILE": "caps"})), "key names in any case")
	assert.Equal(t, "us-west-1", awsRegion(env(map[string]string{"AWS_DEFAULT_REGION": "us-west-1"})))
	assert.Equal(t, "us-east-1", awsRegion(func(string) string { return "" }))
}

// TestS3EndpointURLs: the object URL and signing region each endpoint form
// gives.
func TestS3EndpointURLs(t *testing.T) {
	none := func(string) string { return "" }
	for _, c := range []struct {
		endpoint string
		getenv   func(string) string
		url      string
		region   string
	}{
		{"s3://my-bucket/dir/disk.img", none, "https://my-bucket.s3.us-east-1.amazonaws.com/dir/disk.img", "us-east-1"},
		{"s3://my.bucket/disk.img?region=eu-central-1", none, "https://s3.eu-central-1.amazonaws.com/my.bucket/disk.img", "eu-central-1"},
		{"s3://b/k%3Fq.img", func(k string) string {
			return map[string]string{"AWS_ENDPOINT_URL_S3": "http://minio:9000", "AWS_REGION": "r1"}[k]
		}, "http://minio:9000/b/k%3Fq.img", "r1"},
		{"s3+https://bucket.s3.us-west-2.amazonaws.com/a/b.img", none, "https://bucket.s3.us-west-2.amazonaws.com/a/b.img", "us-west-2"},
		{"s3+https://s3-eu-west-1.amazonaws.com/bucket/b.img", none, "https://s3-eu-west-1.amazonaws.com/bucket/b.img", "eu-west-1"},
		{"s3+http://127.0.0.1:9000/bucket/a b.img", none, "http://127.0.0.1:9000/bucket/a%20b.img", "us-east-1"},
	} {
		src, err := newS3(c.endpoint, Config{}, c.getenv)
		require.NoError(t, err, c.endpoint)
		s := src.(*s3Source)
		assert.Equal(t, c.url, s.Source.(*httpSource).url.String(), c.endpoint)
		assert.Equal(t, c.region, s.Source.(*httpSource).client.Transport.(*s3Transport).region, c.endpoint)
	}
}

func TestGCSErrorMessages(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{404, `{"error":{"code":404,"message":"The specified bucket does not exist."}}`, "the bucket does not exist (The specified bucket does not exist.)"},
		{404, `{"error":{"code":404,"message":"No such object: images/notes-bucket.img"}}`, "no such object (No such object: images/notes-bucket.img)"},
		{404, `<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist.</Message></Error>`, "the bucket does not exist (NoSuchBucket: "},
		{401, `{"error":{"code":401,"message":"Invalid Credentials"}}`, "wrong credentials (Invalid Credentials)"},
		{403, `{"error":{"code":403,"message":"x does not have storage.objects.get access"}}`, "access denied"},
		{404, "Not Found", "no such object (Not Found)"},
	} {
		resp := &http.Response{StatusCode: c.status, Status: http.StatusText(c.status), Body: io.NopCloser(strings.NewReader(c.body))}
		err := gcsError(resp, "gs://images/x")
		assert.Contains(t, err.Error(), c.want)
		var se *errdefs.HTTPStatusError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, c.status, se.StatusCode)
	}
}
