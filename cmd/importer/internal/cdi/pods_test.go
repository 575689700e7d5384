package cdi

import (
	"crypto/tls"
	"io"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/uploadserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCloneMetric: the cloner's progress matches the controller's
// expression for its ownerUID.
func TestCloneMetric(t *testing.T) {
	srv := httptest.NewServer(NewCloneMetricsHandler(func() float64 { return 42.5 }, "uid-7"))
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	controller := regexp.MustCompile(`(kubevirt_cdi_import_progress_total|kubevirt_cdi_clone_progress_total)\{ownerUID="uid-7"\} (\d{1,3}\.?\d*)`)
	m := controller.FindStringSubmatch(string(body))
	require.NotNil(t, m, "%s", body)
	assert.Equal(t, CloneProgressMetricName, m[1])
	assert.Equal(t, "42.5", m[2])
}

func TestUploadServerFromEnvDefaults(t *testing.T) {
	c, err := UploadServerFromEnv(envOf(map[string]string{"TLS_CERT_FILE": "/c/tls.crt", "TLS_KEY_FILE": "/c/tls.key"}))
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:8443", c.Listen)
	assert.Equal(t, "/data/disk.img", c.Destination)
	assert.Equal(t, "/dev/termination-log", c.TerminationLog)
	assert.True(t, c.Deadline.IsZero())
	assert.Equal(t, uint16(tls.VersionTLS12), c.MinVersion)
}

func TestUploadServerFromEnv(t *testing.T) {
	c, err := UploadServerFromEnv(envOf(map[string]string{
		"LISTEN_ADDRESS": "127.0.0.1", "LISTEN_PORT": "9443", "DESTINATION": "/dev/cdi-block-volume",
		"UPLOAD_IMAGE_SIZE": "1Gi", "FILESYSTEM_OVERHEAD": "0.055", "PREALLOCATION": "true",
		"DEADLINE": "2026-12-01T11:00:00Z", "TLS_CERT_FILE": "/c/tls.crt", "TLS_KEY_FILE": "/c/tls.key",
		"CLIENT_CERT_FILE": "/c/ca.crt", "CLIENT_NAME": "proxy", "TLS_MIN_VERSION": "VersionTLS13",
	}))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9443", c.Listen)
	assert.Equal(t, "/dev/cdi-block-volume", c.Destination)
	assert.Equal(t, int64(1<<30), c.Size)
	assert.InDelta(t, 0.055, c.FilesystemOverhead, 1e-9)
	assert.True(t, c.Preallocation)
	assert.Equal(t, time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC), c.Deadline.UTC())
	assert.Equal(t, [4]string{"/c/tls.crt", "/c/tls.key", "/c/ca.crt", "proxy"}, [4]string{c.CertFile, c.KeyFile, c.ClientCAFile, c.ClientName})
	assert.Equal(t, uint16(tls.VersionTLS13), c.MinVersion)
}

func TestUploadServerFromEnvRefusals(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"bad port":              {"LISTEN_PORT": "http"},
		"bad deadline":          {"DEADLINE": "tomorrow"},
		"cert without key":      {"TLS_CERT_FILE": "/c/tls.crt"},
		"client CA without TLS": {"CLIENT_CERT_FILE": "/c/ca.crt"},
		"no TLS":                {},
		"bad preallocation":     {"PREALLOCATION": "maybe"},
	} {
		_, err := UploadServerFromEnv(envOf(env))
		assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, name)
	}
}

func TestUploadTerminationMessages(t *testing.T) {
	assert.Equal(t, `{"deadlinePassed":true,"message":"Deadline Passed"}`, string(DeadlineMessage()))
	m := UploadTerminationMessage(NewTerminationMessage(nil, nil), true)
	assert.Equal(t, uploadserver.MessageCloneComplete, m.Message)
	assert.Contains(t, string(m.JSON()), `"preallocationApplied":false`)
	assert.Equal(t, uploadserver.MessageUploadComplete, UploadTerminationMessage(m, false).Message)
}

func TestClonerFromEnv(t *testing.T) {
	_, err := ClonerFromEnv(envOf(map[string]string{"VOLUME_MODE": "block", "MOUNT_POINT": "/dev/x"}))
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, "UPLOAD_URL missing")
	_, err = ClonerFromEnv(envOf(map[string]string{"VOLUME_MODE": "block", "MOUNT_POINT": "/dev/x", "UPLOAD_URL": "https://u"}))
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, "no client certificate")
	_, err = ClonerFromEnv(envOf(map[string]string{"VOLUME_MODE": "tape", "MOUNT_POINT": "/x", "UPLOAD_URL": "https://u"}))
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, "bad volume mode")
	assert.Equal(t, "blockdevice-clone", ClonerConfig{VolumeMode: "block"}.ContentType())
	assert.Equal(t, "filesystem-clone", ClonerConfig{VolumeMode: "filesystem"}.ContentType())
}
