package importer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// A caller's *tls.Config or http.RoundTripper carries the requests.
func TestCallerTLSConfigAndTransport(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 6)
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	target := func() string { return filepath.Join(t.TempDir(), "disk.img") }

	_, err := importer.Import(context.Background(), importer.Options{Source: srv.URL + "/disk.raw", Target: target(), Logger: testimg.Logger(t), Retries: new(0)})
	require.ErrorIs(t, err, importer.ErrSourceUnreachable, "the test CA is not trusted by default")

	o := importer.Options{Source: srv.URL + "/disk.raw", Target: target(), Logger: testimg.Logger(t),
		TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	_, err = importer.Import(context.Background(), o)
	require.NoError(t, err)
	expectImage(t, raw, o.Target, false)

	tr := &countingTransport{next: srv.Client().Transport}
	o = importer.Options{Source: srv.URL + "/disk.raw", Target: target(), Logger: testimg.Logger(t), Transport: tr}
	_, err = importer.Import(context.Background(), o)
	require.NoError(t, err)
	assert.Positive(t, tr.n.Load())
	expectImage(t, raw, o.Target, false)
}

// Retries: nil is the default (10), new(0) none.
func TestRetriesZeroMeansNone(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		retries *int
		want    int64
	}{{new(0), 1}, {new(2), 3}, {nil, 11}} {
		hits.Store(0)
		_, err := importer.Import(context.Background(), importer.Options{
			Source: srv.URL + "/disk.img", Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t),
			Retries: c.retries, Access: datasource.Access{
				RetryBackoff: time.Millisecond,
			},
		})
		require.ErrorIs(t, err, importer.ErrSourceRefused)
		assert.Equal(t, c.want, hits.Load())
	}
}

// Options.Egress applies to the transport built around a caller's
// TLSConfig, and cannot be combined with a caller's Transport.
func TestEgressWithCallerTLSConfigAndTransport(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	deny, err := datasource.ParseEgressList("127.0.0.0/8")
	require.NoError(t, err)
	policy := &importer.EgressPolicy{Deny: deny}
	target := filepath.Join(t.TempDir(), "disk.img")

	_, err = importer.Import(context.Background(), importer.Options{Source: srv.URL + "/disk.raw", Target: target, Logger: testimg.Logger(t),
		TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, Access: datasource.Access{
			Egress: policy,
		}})
	require.ErrorIs(t, err, importer.ErrEgressDenied)
	var ee *importer.EgressError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "127.0.0.1", ee.Addr)

	_, err = importer.Import(context.Background(), importer.Options{Source: srv.URL + "/disk.raw", Target: target, Logger: testimg.Logger(t),
		Transport: srv.Client().Transport, Access: datasource.Access{
			Egress: policy,
		}})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "egress policy cannot be applied to a caller's Transport")
}

// The ranged route's reads (qemu-img through our NBD export of HTTP
// ranges) are connections of the policy too: they are made by its dialer,
// and a range read redirected to a denied address fails the import with
// the policy's refusal, that address never connected to.
func TestEgressPolicyCoversRangedReads(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 12)
	www := filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	testimg.Convert(t, raw, filepath.Join(www, "disk.vdi"), "vdi")
	files := http.FileServer(http.Dir(www))
	other, otherConns := testimg.ServeOn(t, "127.0.0.3", files)
	base, _ := testimg.ServeOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved.vdi" && r.Header.Get("Range") != "" && !strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") {
			http.Redirect(w, r, "http://"+other+"/disk.vdi", http.StatusFound)
			return
		}
		r.URL.Path = "/disk.vdi"
		files.ServeHTTP(w, r)
	}))
	var connects atomic.Int32
	deny, err := datasource.ParseEgressList("127.0.0.3")
	require.NoError(t, err)
	policy := &importer.EgressPolicy{Deny: deny, Dialer: &net.Dialer{Timeout: 5 * time.Second,
		Control: func(string, string, syscall.RawConn) error { connects.Add(1); return nil }}}

	o := importer.Options{Source: "http://" + base + "/disk.vdi", Target: filepath.Join(t.TempDir(), "disk.img"),
		TargetOptions: importer.TargetOptions{
			ScratchDir:     t.TempDir(),
			NoStreamDecode: true, // the ranged route, not the stream decoder
		}, Logger: testimg.Logger(t), Access: datasource.Access{
			Egress: policy,
		}}
	res, err := importer.Import(context.Background(), o)
	require.NoError(t, err)
	require.Contains(t, res.Phases, importer.PhaseConvert, "the ranged route")
	expectImage(t, raw, o.Target, false)
	assert.GreaterOrEqual(t, connects.Load(), int32(2), "the first GET and the range reads dial through the policy")

	o.Source, o.Target = "http://"+base+"/moved.vdi", filepath.Join(t.TempDir(), "disk.img")
	start := time.Now()
	res, err = importer.Import(context.Background(), o)
	require.ErrorIs(t, err, importer.ErrEgressDenied)
	t.Logf("refused after %v: %v", time.Since(start), err)
	assert.Zero(t, res.Retries, "a policy refusal is not retried")
	assert.Contains(t, err.Error(), "127.0.0.3 (deny 127.0.0.3/32)")
	assert.Zero(t, otherConns.Load(), "the denied address was connected to")
}
