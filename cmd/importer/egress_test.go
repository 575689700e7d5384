package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// countingServer serves dir on 127.0.0.1 and counts its connections.
func countingServer(t *testing.T, dir string) (url string, conns *atomic.Int32) {
	t.Helper()
	conns = new(atomic.Int32)
	srv := httptest.NewUnstartedServer(http.FileServer(http.Dir(dir)))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/", conns
}

// An env-mode pod may not reach the metadata service: refused before any
// connection, at once (env mode otherwise retries an unreachable server
// for minutes), with the address and the rule in the termination message.
func TestEnvEgressDefaultRefusesMetadataService(t *testing.T) {
	for _, ep := range []string{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "http://[fd00:ec2::254]/latest/api/token"} {
		root := cdiRoot(t)
		code, _, stderr := runCLI(t, nil, env(map[string]string{
			"IMPORTER_SOURCE":      "http",
			"IMPORTER_ENDPOINT":    ep,
			"IMPORTER_PATH_PREFIX": root,
		}))
		assert.Equal(t, cdi.ExitFailed, code)
		assert.NotContains(t, stderr, "retrying", "a policy refusal is not retried")
		b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
		require.NoError(t, err)
		text := failureText(t, b)
		assert.Contains(t, text, "egress policy denies the address")
		assert.Regexp(t, `169\.254\.169\.254 \(deny 169\.254\.0\.0/16\)|fd00:ec2::254 \(deny fd00:ec2::254/128\)`, text)
		_, err = os.Stat(filepath.Join(root, "data/disk.img"))
		assert.True(t, os.IsNotExist(err))
	}
}

// IMPORTER_EGRESS_DENY replaces the default list and
// IMPORTER_EGRESS_ALLOW narrows what is reachable; env mode's default
// reaches loopback.
func TestEnvEgressFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 7)
	base, conns := countingServer(t, dir)
	for _, tc := range []struct {
		name    string
		env     map[string]string
		refused string
	}{
		{"default", nil, ""},
		{"deny loopback", map[string]string{"IMPORTER_EGRESS_DENY": "default,127.0.0.0/8"}, "127.0.0.1 (deny 127.0.0.0/8)"},
		{"allow elsewhere", map[string]string{"IMPORTER_EGRESS_ALLOW": "10.0.0.0/8"}, "127.0.0.1 (not in allow list 10.0.0.0/8)"},
		{"allow loopback", map[string]string{"IMPORTER_EGRESS_ALLOW": "127.0.0.1", "IMPORTER_EGRESS_DENY": "none"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := cdiRoot(t)
			e := map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": base + "disk.raw", "IMPORTER_PATH_PREFIX": root}
			for k, v := range tc.env {
				e[k] = v
			}
			before := conns.Load()
			code, _, _ := runCLI(t, nil, env(e))
			b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
			require.NoError(t, err)
			if tc.refused == "" {
				require.Equal(t, cdi.ExitOK, code)
				assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(root, "data/disk.img"), -1))
				return
			}
			assert.Equal(t, cdi.ExitFailed, code)
			assert.Contains(t, failureText(t, b), tc.refused)
			assert.Equal(t, before, conns.Load(), "no connection to a refused address")
		})
	}

	root := cdiRoot(t)
	code, _, stderr := runCLI(t, nil, env(map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": base + "disk.raw",
		"IMPORTER_PATH_PREFIX": root, "IMPORTER_EGRESS_DENY": "169.254.0.0/33"}))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, `IMPORTER_EGRESS_DENY: egress network "169.254.0.0/33"`)
}

// The command line has no policy unless asked: loopback is reached; with
// --egress-deny the refusal is reported with its own reason.
func TestCLIEgressOffByDefault(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 8)
	base, conns := countingServer(t, dir)

	dest := filepath.Join(t.TempDir(), "disk.img")
	code, _, _ := runCLI(t, nil, env(nil), base+"disk.raw", dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))

	before := conns.Load()
	dest = filepath.Join(t.TempDir(), "disk.img")
	code, stdout, stderr := runCLI(t, nil, env(nil), "--json", "--egress-deny", "default", "--egress-deny", "127.0.0.0/8,::1", base+"disk.raw", dest)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "egress policy denies the address: 127.0.0.1 (deny 127.0.0.0/8)")
	m := decode(t, []byte(stdout))
	assert.Equal(t, "EgressDenied", m.Reason)
	assert.Equal(t, before, conns.Load())

	code, _, stderr = runCLI(t, nil, env(nil), "--egress-allow", "loopback", base+"disk.raw", dest)
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, `--egress-allow: egress network "loopback"`)
}
