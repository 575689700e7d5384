package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// cloudIdentity is what TestNoSecretInAnyOutput needs for the cloud
// identity flows: an STS answering AssumeRoleWithWebIdentity, a container
// credentials agent, an instance metadata service (IMDSv2), a GKE metadata
// server and a workload identity token exchange, each answering keys that
// the S3 front takes (its key id and session token, a secret key of its
// own) or a GCS token, and refusing a
// token it does not know with a message that quotes it, as a careless
// server might. The tokens are real JWTs of a test issuer; every part of
// them, and every answer, is a secret.
type cloudIdentity struct {
	secrets []string
	dir     string
	sts     string // the STS's URL
	agent   string // the container agent's URL
	imdsURL string
	gceHost string // GCE_METADATA_HOST
	exch    *objtest.GCPSTS

	webGood, webBad string // token files
	podGood, podBad string
	wifGood, wifBad string
}

const cloudWIFAudience = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k8s"

func startCloudIdentity(t *testing.T) *cloudIdentity {
	c := &cloudIdentity{dir: t.TempDir()}
	oidc := objtest.StartOIDC(t)
	token := func(name, aud string) (file, tok string) {
		tok = oidc.Token(t, objtest.TokenOptions{Audience: aud, Subject: "system:serviceaccount:ns:" + name})
		parts := strings.Split(tok, ".")
		c.secrets = append(c.secrets, tok, parts[1], parts[2])
		file = filepath.Join(c.dir, name)
		require.NoError(t, os.WriteFile(file, []byte(tok), 0o600))
		return file, tok
	}
	var webGood, podGood string
	c.webGood, webGood = token("web-good", "sts.amazonaws.com")
	c.webBad, _ = token("web-bad", "sts.amazonaws.com")
	c.podGood, podGood = token("pod-good", "pods.eks.amazonaws.com")
	c.podBad, _ = token("pod-bad", "pods.eks.amazonaws.com")
	c.wifGood, _ = token("wif-good", cloudWIFAudience)
	c.wifBad, _ = token("wif-bad", "another-audience")
	c.secrets = append(c.secrets, stsSecret, podSecret, imdsSecret, imdsToken, gcsFederat, gcsImperson, gcsMetaTok)
	expiry := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)

	c.sts = testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		tok := form.Get("WebIdentityToken")
		if form.Get("Action") != "AssumeRoleWithWebIdentity" || tok != webGood {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>`+
				`<Code>InvalidIdentityToken</Code><Message>The token `+tok+` is not valid</Message></Error></ErrorResponse>`)
			return
		}
		_, _ = io.WriteString(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>`+
			`<Credentials><AccessKeyId>`+s3KeyID+`</AccessKeyId><SecretAccessKey>`+stsSecret+`</SecretAccessKey><SessionToken>`+s3Session+
			`</SessionToken><Expiration>`+expiry+`</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`)
	})).URL

	c.agent = testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("Authorization")
		if tok != podGood {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"code": "AccessDeniedException", "message": "token " + tok + " rejected"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"AccessKeyId": s3KeyID, "SecretAccessKey": podSecret, "Token": s3Session, "Expiration": expiry})
	})).URL + "/v1/credentials"

	c.imdsURL = testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			_, _ = io.WriteString(w, imdsToken)
		case r.Header.Get("X-Aws-Ec2-Metadata-Token") != imdsToken:
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			_, _ = io.WriteString(w, "role")
		default:
			_ = json.NewEncoder(w).Encode(map[string]string{"Code": "Success", "AccessKeyId": s3KeyID, "SecretAccessKey": imdsSecret,
				"Token": s3Session, "Expiration": expiry})
		}
	})).URL

	c.gceHost = strings.TrimPrefix(testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata-Flavor") != "Google" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Metadata-Flavor", "Google")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": gcsMetaTok, "expires_in": 3599, "token_type": "Bearer"})
	})).URL, "http://")

	c.exch = objtest.StartGCPSTS(t, oidc, cloudWIFAudience)
	c.exch.FederatedToken, c.exch.AccessToken = gcsFederat, gcsImperson
	return c
}

// webIdentity is EKS IRSA's environment, with the token the STS takes or
// one it refuses.
func (c *cloudIdentity) webIdentity(good bool) map[string]string {
	file := c.webBad
	if good {
		file = c.webGood
	}
	return map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": file, "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/importer", "AWS_ENDPOINT_URL_STS": c.sts}
}

// container is EKS Pod Identity's environment.
func (c *cloudIdentity) container(good bool) map[string]string {
	file := c.podBad
	if good {
		file = c.podGood
	}
	return map[string]string{"AWS_CONTAINER_CREDENTIALS_FULL_URI": c.agent, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": file}
}

func (c *cloudIdentity) imds() map[string]string {
	return map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": c.imdsURL}
}

func (c *cloudIdentity) gceMetadata() map[string]string {
	return map[string]string{"GCE_METADATA_HOST": c.gceHost}
}

// wifFile writes an external_account file with the subject token the
// exchange takes or one for another audience, impersonating a service
// account or not.
func (c *cloudIdentity) wifFile(good, impersonate bool) string {
	file := c.wifBad
	if good {
		file = c.wifGood
	}
	cfg := map[string]any{"type": "external_account", "audience": cloudWIFAudience, "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
		"token_url": c.exch.TokenURL(), "credential_source": map[string]any{"file": file}}
	if impersonate {
		cfg["service_account_impersonation_url"] = c.exch.ImpersonationURL()
	}
	b, _ := json.Marshal(cfg)
	f, _ := os.CreateTemp(c.dir, "wif-*.json")
	_, _ = f.Write(b)
	f.Close()
	return f.Name()
}
