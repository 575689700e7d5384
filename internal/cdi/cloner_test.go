package cdi

import (
	"io"
	"net/http/httptest"
	"regexp"
	"testing"

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
