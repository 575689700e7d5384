package datasource_test

import (
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
)

// Go reads the proxy environment once per process and never proxies
// loopback addresses, so the client side runs in a child test process with
// HTTP_PROXY set and asks for a non-loopback name only the proxy serves.
func TestHTTPProxyFromEnvironment(t *testing.T) {
	if want := os.Getenv("DATASOURCE_PROXY_CHILD_SHA"); want != "" {
		src, err := datasource.NewHTTP("http://image.invalid/disk.img", datasource.Config{})
		require.NoError(t, err)
		_, got, err := readAll(t, src)
		require.NoError(t, err)
		s := sum(got)
		require.Equal(t, want, hex.EncodeToString(s[:]))
		return
	}
	data := testImage(t, 100<<10)
	var rec seen
	proxy := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		if r.URL.Host != "image.invalid" || r.URL.Path != "/disk.img" {
			http.Error(w, "unexpected proxy request "+r.URL.String(), http.StatusBadGateway)
			return
		}
		serveBytes(data)(w, r)
	}))
	s := sum(data)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHTTPProxyFromEnvironment$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		"DATASOURCE_PROXY_CHILD_SHA="+hex.EncodeToString(s[:]),
		"HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child test: %s", out)
	h := rec.all()
	require.Len(t, h, 1, "the request must have gone through the proxy")
	assert.Equal(t, "diskimport-engine", h[0].Get("User-Agent"))
}
