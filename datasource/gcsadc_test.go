package datasource_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
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

// wifAudience is the workload identity provider's audience, as Google
// writes it into an external_account file and wants in the subject token.
const wifAudience = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/k8s"

// externalAccountFile writes a workload identity federation file whose
// subject token is read from tokenFile, exchanged at sts, and (when
// impersonate) used to impersonate sts's service account.
func externalAccountFile(t *testing.T, sts *objtest.GCPSTS, tokenFile string, impersonate bool) string {
	cfg := map[string]any{
		"type":               "external_account",
		"audience":           wifAudience,
		"subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
		"token_url":          sts.TokenURL(),
		"credential_source":  map[string]any{"file": tokenFile, "format": map[string]string{"type": "text"}},
	}
	if impersonate {
		cfg["service_account_impersonation_url"] = sts.ImpersonationURL()
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "wif.json")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

// TestGCSExternalAccount: workload identity federation with a Kubernetes
// projected token as the subject token: it is exchanged at a token
// exchange server (which checks its signature against the issuer's key,
// its expiry and its audience), the resulting bearer, directly or after
// impersonating a service account, is the one fake-gcs-server is sent
// (checked by the hop in front of it), and the object arrives byte for
// byte; a token for another audience, or expired, is refused with the
// exchange's reason, at once.
func TestGCSExternalAccount(t *testing.T) {
	data := testImage(t, 256<<10)
	g, _ := gcsFixture(t, data)
	oidc := objtest.StartOIDC(t)
	sts := objtest.StartGCPSTS(t, oidc, wifAudience)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken := func(opt objtest.TokenOptions) string {
		tok := oidc.Token(t, opt)
		require.NoError(t, os.WriteFile(tokenFile, []byte(tok), 0o600))
		return tok
	}

	for _, c := range []struct {
		name        string
		impersonate bool
		bearer      string
	}{
		{"federated token", false, sts.FederatedToken},
		{"impersonated service account", true, sts.AccessToken},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := writeToken(objtest.TokenOptions{Audience: wifAudience})
			var saw atomic.Bool
			front := tokenCheckingFront(t, g, c.bearer, &saw)
			t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", externalAccountFile(t, sts, tokenFile, c.impersonate))
			before := sts.Impersonations()
			src, err := datasource.New("gs+"+front.URL+"/images/dir/disk.img", gcsConfig)
			require.NoError(t, err)
			requireContent(t, src, data)
			assert.True(t, saw.Load(), "the storage server got the bearer of the exchange")
			assert.Equal(t, tok, sts.Exchanged()[len(sts.Exchanged())-1])
			if c.impersonate {
				assert.Equal(t, before+1, sts.Impersonations())
			} else {
				assert.Equal(t, before, sts.Impersonations())
			}
		})
	}

	for _, c := range []struct {
		name string
		opt  objtest.TokenOptions
		want string
	}{
		{"for another audience", objtest.TokenOptions{Audience: "sts.amazonaws.com"}, "invalid_grant"},
		{"expired", objtest.TokenOptions{Audience: wifAudience, Lifetime: -time.Minute}, "expired"},
		{"signed by another key", objtest.TokenOptions{Audience: wifAudience, ForeignKey: true}, "signature is invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := writeToken(c.opt)
			t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", externalAccountFile(t, sts, tokenFile, false))
			src, err := datasource.New("gs+"+g.URL+"/images/dir/disk.img", datasource.Config{Access: datasource.Access{RetryBackoff: time.Second}})
			require.NoError(t, err)
			before := len(sts.Exchanged())
			_, err = src.Open(context.Background())
			require.Error(t, err)
			t.Logf("%v", err)
			assert.Len(t, sts.Exchanged(), before+1, "not retried")
			assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
			assert.Contains(t, err.Error(), "GCS external account credentials")
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), tok)
		})
	}
}

// TestGCSExternalAccountChecks: a subject token from a URL, a program or
// the AWS metadata service is refused as an option; so is a missing
// subject token file.
func TestGCSExternalAccountChecks(t *testing.T) {
	dir := t.TempDir()
	for name, source := range map[string]any{
		"url":           map[string]any{"url": "http://169.254.169.254/token"},
		"executable":    map[string]any{"executable": map[string]any{"command": "/bin/true"}},
		"aws":           map[string]any{"environment_id": "aws1", "regional_cred_verification_url": "https://sts.amazonaws.com"},
		"no file":       map[string]any{"file": filepath.Join(dir, "absent")},
		"no source":     nil,
		"bad token url": map[string]any{"file": "/dev/null"},
	} {
		cfg := map[string]any{"type": "external_account", "audience": wifAudience, "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
			"token_url": "https://sts.googleapis.com/v1/token", "credential_source": source}
		if name == "bad token url" {
			cfg["token_url"] = "ftp://x"
		}
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		require.NoError(t, os.WriteFile(p, b, 0o600))
		t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", p)
		_, err = datasource.New("gs://b/k", datasource.Config{})
		assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, name)
		t.Logf("%s: %v", name, err)
	}
}

// gceMetadata is a GKE/GCE metadata server: the default service account's
// token for a request with Metadata-Flavor: Google.
func gceMetadata(t *testing.T, host, token string) (string, *atomic.Int32) {
	var hits atomic.Int32
	srv := testimg.ServerOn(t, host, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Metadata-Flavor") != "Google" || r.URL.Path != "/computeMetadata/v1/instance/service-accounts/default/token" ||
			!strings.Contains(r.URL.Query().Get("scopes"), "devstorage.read_only") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
	}))
	return strings.TrimPrefix(srv.URL, "http://"), &hits
}

// TestGCSMetadataServerOnlyWhenAllowed: the metadata server is asked for
// a token only with Access.MetadataCredentials, and then its token reaches
// the storage server; its address, denied by the egress policy, is reached
// by the token request only: a redirect of the import there is refused.
func TestGCSMetadataServerOnlyWhenAllowed(t *testing.T) {
	data := testImage(t, 256<<10)
	g, _ := gcsFixture(t, data)
	host, hits := gceMetadata(t, "127.0.0.2", "ya29.metadata-token-0001")
	t.Setenv("GCE_METADATA_HOST", host)
	var saw atomic.Bool
	front := tokenCheckingFront(t, g, "ya29.metadata-token-0001", &saw)
	ep := "gs+" + front.URL + "/images/dir/disk.img"
	policy := &datasource.EgressPolicy{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}

	src, err := datasource.New(ep, datasource.Config{Access: datasource.Access{Egress: policy}})
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.False(t, saw.Load(), "anonymous")
	assert.Zero(t, hits.Load(), "not allowed: never asked")

	src, err = datasource.New(ep, datasource.Config{Access: datasource.Access{Egress: policy, MetadataCredentials: true}})
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.True(t, saw.Load())
	assert.Equal(t, int32(1), hits.Load())

	redirect := testimg.ServerOn(t, "127.0.0.1", http.RedirectHandler("http://"+host+"/computeMetadata/v1/instance/service-accounts/default/token", http.StatusFound))
	src, err = datasource.New("gs+"+redirect.URL+"/images/dir/disk.img", datasource.Config{Retries: -1, Access: datasource.Access{Egress: policy, MetadataCredentials: true}})
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	var egress *errdefs.EgressError
	require.ErrorAs(t, err, &egress, "%v", err)
	assert.Equal(t, int32(2), hits.Load(), "the token request, not the redirect")
}
