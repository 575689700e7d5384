package datasource_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// clearAWSEnv unsets every variable that picks S3 credentials, so that a
// test sees only the ones it sets.
func clearAWSEnv(t *testing.T) {
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN", "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
}

// credentialAgent is an ECS / EKS Pod Identity credentials agent: GET with
// the authorization token answers the S3 server's keys as temporary
// credentials that expire after lifetime.
type credentialAgent struct {
	url      string
	lifetime time.Duration
	mu       sync.Mutex
	tokens   []string // the tokens it was asked with, in order
	refuse   atomic.Bool
	lapsed   atomic.Bool // the next answer holds a key id the S3 server no longer knows
}

func startCredentialAgent(t *testing.T, host string, s *objtest.S3, wantToken func() string, lifetime time.Duration) *credentialAgent {
	a := &credentialAgent{lifetime: lifetime}
	srv := testimg.ServerOn(t, host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("Authorization")
		a.mu.Lock()
		a.tokens = append(a.tokens, tok)
		a.mu.Unlock()
		if a.refuse.Load() || tok != wantToken() || r.URL.Path != "/v1/credentials" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"code": "AccessDeniedException", "message": "the token is not valid"})
			return
		}
		id := s.Access
		if a.lapsed.Swap(false) {
			id = "LAPSEDKEYID0000000001"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"AccessKeyId": id, "SecretAccessKey": s.Secret,
			"Token": "", "Expiration": time.Now().Add(a.lifetime).UTC().Format(time.RFC3339)})
	}))
	a.url = srv.URL + "/v1/credentials"
	return a
}

func (a *credentialAgent) asked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.tokens...)
}

// TestS3ContainerCredentials: with only AWS_CONTAINER_CREDENTIALS_FULL_URI
// and its token file (EKS Pod Identity), the object is read with the
// agent's credentials, byte for byte; the token file is read again when
// the credentials are renewed (at 80% of their lifetime), so a rotated
// token is the one sent.
func TestS3ContainerCredentials(t *testing.T) {
	clearAWSEnv(t)
	data := testImage(t, 1<<20)
	s, ep := s3Fixture(t, data)
	tokenFile := filepath.Join(t.TempDir(), "eks-pod-identity-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("podtoken-1"), 0o600))
	current := func() string { b, _ := os.ReadFile(tokenFile); return string(b) }
	agent := startCredentialAgent(t, "127.0.0.1", s, current, 3*time.Second)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", agent.url)
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tokenFile)

	src, err := datasource.New(ep, datasource.Config{})
	require.NoError(t, err)
	requireContent(t, src, data)
	first := agent.asked()
	require.NotEmpty(t, first)
	for _, tok := range first {
		assert.Equal(t, "podtoken-1", tok)
	}

	require.NoError(t, os.WriteFile(tokenFile, []byte("podtoken-2"), 0o600))
	// Real time: the agent and the object store are real servers on
	// loopback, outside any synctest bubble, and the credentials' expiry is
	// theirs. A slower machine only sleeps further past 80% of the 3 s
	// lifetime (or past the end of it: fetched again all the same).
	time.Sleep(2500 * time.Millisecond)
	requireContent(t, src, data)
	after := agent.asked()
	assert.Greater(t, len(after), len(first), "renewed")
	assert.Equal(t, "podtoken-2", after[len(after)-1], "with the rotated token")
}

// TestS3LapsedTemporaryCredentialsFetchedAgain: temporary credentials the
// S3 server no longer knows (MinIO forgets STS credentials the moment they
// expire, while the client may still hold them for a clock's tick) are
// fetched again once and the request sent again: the read completes byte
// for byte, and the agent was asked twice, not once per request.
func TestS3LapsedTemporaryCredentialsFetchedAgain(t *testing.T) {
	clearAWSEnv(t)
	data := testImage(t, 1<<20)
	s, ep := s3Fixture(t, data)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("podtoken-1"), 0o600))
	agent := startCredentialAgent(t, "127.0.0.1", s, func() string { return "podtoken-1" }, time.Hour)
	agent.lapsed.Store(true)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", agent.url)
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tokenFile)

	src, err := datasource.New(ep, datasource.Config{})
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.Len(t, agent.asked(), 2, "fetched again once after the refusal")
}

// TestS3ContainerCredentialsRefused: the agent's refusal ends the open at
// once (no retry) with a reason that names the flow and the agent's
// message, and no token.
func TestS3ContainerCredentialsRefused(t *testing.T) {
	clearAWSEnv(t)
	s, ep := s3Fixture(t, testImage(t, 64<<10))
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("podtoken-secret-0001"), 0o600))
	agent := startCredentialAgent(t, "127.0.0.1", s, func() string { return "another" }, time.Hour)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", agent.url)
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tokenFile)
	src, err := datasource.New(ep, datasource.Config{Access: datasource.Access{RetryBackoff: time.Second}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
	var se *errdefs.HTTPStatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
	assert.Contains(t, err.Error(), "S3 container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI) from "+agent.url+" refused")
	assert.Contains(t, err.Error(), "AccessDeniedException: the token is not valid")
	assert.NotContains(t, err.Error(), "podtoken-secret-0001")
	assert.Len(t, agent.asked(), 1, "a refusal is not retried")
}

// TestS3ContainerCredentialsChecks: a plain-http agent must be on
// loopback or one of ECS's and EKS's addresses; a missing token file fails
// as an option naming the file.
func TestS3ContainerCredentialsChecks(t *testing.T) {
	clearAWSEnv(t)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.1.2.3/v1/credentials")
	_, err := datasource.New("s3+http://127.0.0.1:1/b/k", datasource.Config{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.ErrorContains(t, err, "plain http is only for a loopback address")

	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials")
	missing := filepath.Join(t.TempDir(), "missing-token")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", missing)
	_, err = datasource.New("s3+http://127.0.0.1:1/b/k", datasource.Config{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.ErrorContains(t, err, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE "+missing+": no such file or directory")

	// The EKS agent's address is accepted (nothing is asked of it until
	// the first request).
	require.NoError(t, os.WriteFile(missing, []byte("t"), 0o600))
	_, err = datasource.New("s3+http://127.0.0.1:1/b/k", datasource.Config{})
	require.NoError(t, err)
}

// TestS3CredentialEndpointOnlyForCredentials: the egress policy denies the
// agent's address; the credential request reaches it all the same (the
// pod's own setting names it), the object is read, and a redirect of the
// import to that address is refused by the policy.
func TestS3CredentialEndpointOnlyForCredentials(t *testing.T) {
	clearAWSEnv(t)
	data := testImage(t, 256<<10)
	s, ep := s3Fixture(t, data)
	agent := startCredentialAgent(t, "127.0.0.2", s, func() string { return "" }, time.Hour)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", agent.url)
	policy := &datasource.EgressPolicy{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	src, err := datasource.New(ep, datasource.Config{Access: datasource.Access{Egress: policy}})
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.Len(t, agent.asked(), 1)

	// An S3 endpoint that redirects to the agent.
	front := testimg.ServerOn(t, "127.0.0.1", http.RedirectHandler(agent.url, http.StatusTemporaryRedirect))
	src, err = datasource.New("s3+"+front.URL+"/images/dir/disk.img", datasource.Config{Retries: -1, Access: datasource.Access{Egress: policy}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	var egress *errdefs.EgressError
	require.ErrorAs(t, err, &egress, "%v", err)
	assert.Equal(t, "127.0.0.2", egress.Addr)
	assert.Len(t, agent.asked(), 2, "the credentials were fetched again for the new source, and the redirect never arrived")
}

// imdsServer is an instance metadata service that speaks IMDSv2 only: a
// GET without the session token of a PUT is refused.
type imdsServer struct {
	url  string
	hits atomic.Int32
}

func startIMDS(t *testing.T, s *objtest.S3) *imdsServer {
	m := &imdsServer{}
	const session = "imds-session-token-0001"
	srv := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.hits.Add(1)
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" && r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds") != "":
			_, _ = w.Write([]byte(session))
		case r.Header.Get("X-Aws-Ec2-Metadata-Token") != session:
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			_, _ = w.Write([]byte("importer-role\n"))
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/importer-role":
			_ = json.NewEncoder(w).Encode(map[string]any{"Code": "Success", "AccessKeyId": s.Access, "SecretAccessKey": s.Secret,
				"Token": "", "Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
		default:
			http.NotFound(w, r)
		}
	}))
	m.url = srv.URL
	return m
}

// TestS3MetadataCredentialsOnlyWhenAllowed: the instance metadata service
// is asked (IMDSv2) only with Access.MetadataCredentials; without it the
// request goes unsigned and the server refuses it.
func TestS3MetadataCredentialsOnlyWhenAllowed(t *testing.T) {
	clearAWSEnv(t)
	data := testImage(t, 256<<10)
	s, ep := s3Fixture(t, data)
	imds := startIMDS(t, s)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)

	src, err := datasource.New(ep, datasource.Config{})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	assert.ErrorIs(t, err, errdefs.ErrSourceRefused, "unsigned")
	assert.Zero(t, imds.hits.Load(), "not allowed: never asked")

	src, err = datasource.New(ep, datasource.Config{Access: datasource.Access{MetadataCredentials: true}})
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.Equal(t, int32(3), imds.hits.Load(), "token, role, credentials")

	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	src, err = datasource.New(ep, datasource.Config{Access: datasource.Access{MetadataCredentials: true}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	assert.True(t, errors.Is(err, errdefs.ErrSourceRefused) && strings.Contains(err.Error(), "access denied"), "%v", err)
	assert.Equal(t, int32(3), imds.hits.Load())
}

// TestS3CredentialRequestsNotRedirected: an STS or a container agent that
// redirects is refused at once, and the place it points to never receives
// the token (a 307 would have the client send the form with the token
// again).
func TestS3CredentialRequestsNotRedirected(t *testing.T) {
	var elsewhere atomic.Int32
	other := testimg.ServerOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	redirector := testimg.ServerOn(t, "127.0.0.1", http.RedirectHandler(other.URL+"/sts", http.StatusTemporaryRedirect))
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("token-never-elsewhere"), 0o600))
	for name, env := range map[string]map[string]string{
		"web identity": {"AWS_WEB_IDENTITY_TOKEN_FILE": tokenFile, "AWS_ENDPOINT_URL_STS": redirector.URL},
		"container":    {"AWS_CONTAINER_CREDENTIALS_FULL_URI": redirector.URL + "/v1/credentials", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": tokenFile},
	} {
		t.Run(name, func(t *testing.T) {
			clearAWSEnv(t)
			for k, v := range env {
				t.Setenv(k, v)
			}
			src, err := datasource.New("s3+http://127.0.0.1:1/b/k", datasource.Config{Access: datasource.Access{RetryBackoff: time.Second}})
			require.NoError(t, err)
			_, err = src.Open(context.Background())
			require.Error(t, err)
			assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
			assert.Contains(t, err.Error(), "the endpoint redirected, and a credential request is not sent elsewhere")
			assert.Zero(t, elsewhere.Load())
		})
	}
}
