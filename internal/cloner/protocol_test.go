package cloner_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// A server that offers only sparse-v1 (whose End record held another
// digest) gets CDI's stream from this cloner, and the clone completes,
// instead of a sparse-v2 stream its digest check would fail at the end.
func TestCloneToASparseV1ServerUsesCDIsStream(t *testing.T) {
	img := testimg.Raw(t, t.TempDir(), "source.img", 3*mib, 23)
	dst := filepath.Join(t.TempDir(), "disk.img")
	p := newPKI(t)
	s := startServer(t, p, importer.Options{Target: dst})
	// In front of our server, a proxy that answers as an older one: its
	// HEAD offers sparse-v1; it records the protocol of every POST.
	backend, err := url.Parse("https://" + s.addr)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(backend)
	proxy.Transport = p.clientFor(t, &p.client).Transport
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodHead && resp.Header.Get(cloner.ProtocolHeader) != "" {
			resp.Header.Set(cloner.ProtocolHeader, "sparse-v1")
		}
		return nil
	}
	var mu sync.Mutex
	var posted []string
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			posted = append(posted, r.Header.Get(cloner.ProtocolHeader))
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	defer old.Close()

	res, err := send(t, p, old.URL+uploadserver.PathUpload, cloner.ContentTypeBlock, img, cloner.ProtocolAuto)
	require.NoError(t, err)
	assert.Equal(t, cloner.ProtocolSnappy, res.Protocol)
	mu.Lock()
	assert.Equal(t, []string{""}, posted, "the POSTs' protocol headers")
	mu.Unlock()
	_, serr := s.wait(t)
	require.NoError(t, serr)
	assert.Equal(t, testimg.Digest(t, img, -1), testimg.Digest(t, dst, -1))
}
