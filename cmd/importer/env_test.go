package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
)

// TestEnvHTTPSourceTakesOnlyHTTPURLs: with IMPORTER_SOURCE=http, CDI fetches
// over HTTP only. The engine also reads local files, so without the check an
// endpoint naming a file in the pod (a service-account token, say) would be
// copied into the volume and reported complete.
func TestEnvHTTPSourceTakesOnlyHTTPURLs(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "token")
	require.NoError(t, os.WriteFile(secret, []byte("eyJhbGciOi-pod-service-account-token"), 0o600))

	cases := map[string]struct {
		endpoint string
		want     string
	}{
		"file URL":          {"file://" + secret, `scheme "file", want http or https`},
		"bare path":         {secret, "is a path, not an http or https URL"},
		"relative path":     {"token", "is a path, not an http or https URL"},
		"other scheme":      {"ftp://127.0.0.1/disk.img", `scheme "ftp", want http or https`},
		"http without host": {"http:" + secret, "has no host"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := cdiRoot(t)
			code, _, stderr := runCLI(t, nil, env(map[string]string{
				"IMPORTER_SOURCE":      "http",
				"IMPORTER_ENDPOINT":    tc.endpoint,
				"IMPORTER_PATH_PREFIX": root,
			}))
			assert.Equal(t, cdi.ExitFailed, code)
			assert.Contains(t, stderr, tc.want)
			b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
			require.NoError(t, err)
			text := failureText(t, b)
			assert.Contains(t, text, tc.want)
			assert.NotContains(t, text, "Import Complete")
			_, err = os.Stat(filepath.Join(root, "data/disk.img"))
			assert.True(t, os.IsNotExist(err), "nothing may be written to the volume")
		})
	}
}
