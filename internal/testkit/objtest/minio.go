package objtest

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// MinIOInstall is the MinIO server the STS tests run (a test server binary
// only: MinIO is AGPL and is never imported). MinIO tags no semver
// releases, so the module proxy serves it by pseudo-version.
const MinIOInstall = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// MinIO is a running MinIO server whose STS (AssumeRoleWithWebIdentity, at
// the S3 endpoint's root) checks web identity tokens against an OpenID
// Connect issuer: their signature against the issuer's JWKS, their expiry,
// and their audience (aud or azp) against ClientID. The S3 fields are the
// root user's, for the test's own requests (MakeBucket, Put).
type MinIO struct {
	*S3
	ClientID string // the audience tokens must be for
}

// StartMinIO starts MinIO over a test directory with o as its identity
// provider; a token's "policy" claim names the policy of the credentials
// it is exchanged for (e.g. "readonly"). It skips the test when the
// minio binary is not installed.
func StartMinIO(t testing.TB, o *OIDC, clientID string) *MinIO {
	t.Helper()
	bin := Binary(t, "minio", MinIOInstall)
	addr := freePort(t)
	console := freePort(t)
	m := &MinIO{S3: &S3{URL: "http://" + addr, Access: "minioadmin-test", Secret: "minioadmin-secret-0123456789", Root: t.TempDir(), client: http.DefaultClient},
		ClientID: clientID}
	env := []string{
		"MINIO_ROOT_USER=" + m.Access,
		"MINIO_ROOT_PASSWORD=" + m.Secret,
		"MINIO_IDENTITY_OPENID_CONFIG_URL=" + o.ConfigURL,
		"MINIO_IDENTITY_OPENID_CLIENT_ID=" + clientID,
		"MINIO_IDENTITY_OPENID_CLAIM_NAME=policy",
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"HOME=" + t.TempDir(), // its client config, out of the real home
	}
	startEnv(t, addr, env, bin, "server", "--quiet", "--address", addr, "--console-address", console, m.Root)
	// Listening is not ready, and neither is the health check: the IAM
	// subsystem loads its policies after it, and an STS request before
	// then is refused ("None of the given policies are defined"). Wait
	// until the admin API knows the built-in readonly policy.
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, m.URL+"/minio/admin/v3/info-canned-policy?name=readonly", nil)
		req.Header.Set("X-Amz-Content-Sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
		m.Sign(req)
		resp, err := http.DefaultClient.Do(req)
		status := 0
		if err == nil {
			resp.Body.Close()
			if status = resp.StatusCode; status == http.StatusOK {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("minio's IAM is not ready after 30s: %v (status %d)", err, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
