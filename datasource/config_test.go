package datasource_test

import (
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestHTTPConfigTransportCarriesEveryRequest(t *testing.T) {
	data := testImage(t, 64<<10)
	srv := newServer(t, serveBytes(data))
	tr := &testimg.CountingTransport{Next: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(tr.Next.(*http.Transport).CloseIdleConnections)
	src, err := datasource.NewHTTP(srv.URL+"/disk.img", datasource.Config{Transport: tr})
	require.NoError(t, err)
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.EqualValues(t, 1, tr.N.Load())
	require.NotNil(t, st.Ranges)
	assert.False(t, st.Ranges.Plain, "a caller's transport may carry what the URL does not")

	rr := openRanged(t, src)
	buf := make([]byte, 4096)
	_, err = rr.ReadAt(buf, 8192)
	require.NoError(t, err)
	assert.Equal(t, data[8192:8192+4096], buf)
	assert.EqualValues(t, 3, tr.N.Load(), "the stream, the second Open and the range read")
}

func TestHTTPConfigProxy(t *testing.T) {
	data := testImage(t, 16<<10)
	var rec seen
	proxy := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		if r.URL.Host != "image.invalid" {
			http.Error(w, "unexpected proxy request "+r.URL.String(), http.StatusBadGateway)
			return
		}
		serveBytes(data)(w, r)
	}))
	pu, err := url.Parse(proxy.URL)
	require.NoError(t, err)
	src, err := datasource.NewHTTP("http://image.invalid/disk.img", datasource.Config{Proxy: http.ProxyURL(pu)})
	require.NoError(t, err)
	_, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.Len(t, rec.all(), 1)
}

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
