package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// CDI sets INSECURE_TLS for an HTTP source with
// spec.source.http.insecureSkipVerify (CDI PR 4167): an HTTPS server whose
// certificate no CA the pod trusts vouches for is read with it, a raw
// image as a stream and a qcow2 over ranges, and refused without it.
func TestPodHTTPInsecureTLS(t *testing.T) {
	testimg.Need(t, "qemu-img")
	work := t.TempDir()
	raw, _ := testimg.RawAndQCOW2(t, work, 4<<20, 77)
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(work))) // httptest's own certificate
	t.Cleanup(srv.Close)
	for _, name := range []string{"disk.raw", "disk.qcow2"} {
		t.Run(name+" with INSECURE_TLS=true", func(t *testing.T) {
			data := t.TempDir()
			code, log, out := runPod(t, pod{
				env:     httpEnv(srv.URL+"/"+name, map[string]string{"INSECURE_TLS": "true"}),
				volumes: map[string]string{"/data": data},
			})
			require.Equal(t, cdi.ExitOK, code, "%s\n%s", log, out)
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(data, "disk.img"), 4<<20), "disk.img holds the source's bytes")
		})
	}
	t.Run("without INSECURE_TLS the certificate is checked", func(t *testing.T) {
		data := t.TempDir()
		code, log, _ := runPod(t, pod{
			env:     httpEnv(srv.URL+"/disk.raw", nil),
			volumes: map[string]string{"/data": data},
		})
		assert.Equal(t, cdi.ExitFailed, code)
		assert.Contains(t, failureText(t, log), "certificate")
		assert.Empty(t, testimg.DirNames(t, data))
	})
}
