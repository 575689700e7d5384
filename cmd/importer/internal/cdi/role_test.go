package cdi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// Each pod's environment as CDI's controller writes it picks its role;
// the variables all pods share pick none; two pods' variables are refused.
func TestRoleFromEnv(t *testing.T) {
	shared := map[string]string{"PREALLOCATION": "false", "FILESYSTEM_OVERHEAD": "0.055", "OWNER_UID": "u",
		"TLS_MIN_VERSION": "VersionTLS12", "IMPORTER_METRICS_LISTEN": "127.0.0.1:0", "IMPORTER_LOG_FORMAT": "json"}
	with := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range shared {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	importerEnv := with(map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://h/d", "IMPORTER_CONTENTTYPE": "kubevirt",
		"IMPORTER_IMAGE_SIZE": "1Gi", "INSECURE_TLS": "false", "CACHE_MODE": "TRYNONE"})
	uploadEnv := with(map[string]string{"TLS_KEY_FILE": "/certs/tls.key", "TLS_CERT_FILE": "/certs/tls.crt", "CLIENT_CERT_FILE": "/certs/ca.crt",
		"UPLOAD_IMAGE_SIZE": "1Gi", "CLIENT_NAME": "cdi-uploadproxy", "TLS_CIPHERS": ""})
	cloneEnv := with(map[string]string{"CLIENT_KEY": "k", "CLIENT_CERT": "c", "SERVER_CA_CERT": "ca", "UPLOAD_URL": "https://t/v1beta1/upload",
		"VOLUME_MODE": "filesystem", "MOUNT_POINT": "/var/run/cdi/clone/source"})
	for want, env := range map[Role]map[string]string{RoleImporter: importerEnv, RoleUploadServer: uploadEnv, RoleCloneSource: cloneEnv, RoleNone: shared} {
		got, markers, err := RoleFromEnv(envOf(env))
		require.NoError(t, err, want.String())
		assert.Equal(t, want, got)
		assert.Equal(t, want == RoleNone, len(markers) == 0, "%s: markers %v", want, markers)
	}
	_, markers, _ := RoleFromEnv(envOf(uploadEnv))
	assert.Equal(t, []string{"TLS_CERT_FILE", "TLS_KEY_FILE", "CLIENT_CERT_FILE", "CLIENT_NAME", "UPLOAD_IMAGE_SIZE"}, markers)

	mixed := with(map[string]string{"IMPORTER_SOURCE": "http", "UPLOAD_URL": "https://t/v1beta1/upload"})
	role, _, err := RoleFromEnv(envOf(mixed))
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.Equal(t, RoleNone, role)
	assert.Contains(t, err.Error(), "importer (IMPORTER_SOURCE) and clone-source (UPLOAD_URL)")
}
