package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestEnvS3WebIdentityNoKeys: a CDI importer pod with no Secret at all,
// only what EKS's webhook injects for its ServiceAccount (a projected
// token file and the STS to exchange it at, here MinIO's, which checks the
// token against the test's OpenID issuer), imports a qcow2.xz from S3 with
// env mode's egress policy, byte for byte; with a token for another
// audience the pod fails with the STS's reason in its termination message,
// and without the token in any output.
func TestEnvS3WebIdentityNoKeys(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	oidc := objtest.StartOIDC(t)
	m := objtest.StartMinIO(t, oidc, "sts.importer.test")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, 43)
	xz := testimg.Compress(t, q, "xz")
	data, err := os.ReadFile(xz)
	require.NoError(t, err)
	m.MakeBucket(t, "bucket")
	m.Put(t, "bucket", "disk.qcow2.xz", data)
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_ROLE_ARN"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_ENDPOINT_URL_STS", m.URL)

	for _, c := range []struct {
		name     string
		audience string
	}{
		{"token for the STS", "sts.importer.test"},
		{"token for another audience", "sts.amazonaws.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := oidc.Token(t, objtest.TokenOptions{Audience: c.audience, Claims: map[string]any{"policy": "readonly"}})
			tokenFile := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(tokenFile, []byte(tok), 0o600))
			t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
			root := cdiRoot(t)
			code, stdout, stderr := runCLI(t, nil, env(map[string]string{
				"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": m.URL + "/bucket/disk.qcow2.xz", "IMPORTER_CONTENTTYPE": "kubevirt",
				"IMPORTER_IMAGE_SIZE": "64Mi", "PREALLOCATION": "false", "IMPORTER_PATH_PREFIX": root,
			}))
			term, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
			require.NoError(t, err)
			for _, out := range []string{stdout, stderr, string(term)} {
				assert.NotContains(t, out, strings.Split(tok, ".")[2], "the token's signature")
			}
			if c.audience == "sts.importer.test" {
				require.Equal(t, cdi.ExitOK, code)
				assert.Equal(t, "Import Complete", decode(t, term).Message)
				assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(root, "data/disk.img"), 4<<20))
				return
			}
			require.NotEqual(t, cdi.ExitOK, code)
			msg := failureText(t, term)
			t.Logf("termination message: %s", msg)
			assert.Contains(t, msg, "S3 web identity credentials (AWS_WEB_IDENTITY_TOKEN_FILE) from STS "+m.URL+" refused")
			assert.Contains(t, msg, "must match configured OpenID Client ID")
		})
	}
}
