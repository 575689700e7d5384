package datasource_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/testpki"
)

// s3Fixture is a versitygw with one bucket holding one object.
func s3Fixture(t *testing.T, data []byte) (*objtest.S3, string) {
	t.Helper()
	s := objtest.StartS3(t)
	s.MakeBucket(t, "images")
	s.Put(t, "images", "dir/disk.img", data)
	return s, "s3+" + s.URL + "/images/dir/disk.img"
}

func s3Config(s *objtest.S3) datasource.Config {
	return datasource.Config{Access: datasource.Access{Username: s.Access, Password: s.Secret, RetryBackoff: 10 * time.Millisecond}}
}

func TestS3ReadsObject(t *testing.T) {
	data := testImage(t, 3<<20)
	s, ep := s3Fixture(t, data)
	src, err := datasource.New(ep, s3Config(s))
	require.NoError(t, err)
	assert.Contains(t, src.String(), "s3://images/dir/disk.img")
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), st.Size)
	assert.Equal(t, sum(data), sum(got))
	assert.NotNil(t, st.Ranges, "an S3 object is range-readable")
	assert.True(t, st.HTTPAnswer, "an S3 object is the body of an HTTP answer")
	assert.Equal(t, 0, retriesOf(src))

	// Path style through --s3-endpoint's rewrite, and a region.
	ep2, err := datasource.S3URL("s3://images/dir/disk.img", s.URL, "us-east-1")
	require.NoError(t, err)
	assert.Equal(t, "s3+"+s.URL+"/images/dir/disk.img?region=us-east-1", ep2)
	src, err = datasource.New(ep2, s3Config(s))
	require.NoError(t, err)
	requireContent(t, src, data)
}

func TestS3RangedReads(t *testing.T) {
	data := testImage(t, 1<<20)
	s, ep := s3Fixture(t, data)
	src, err := datasource.New(ep, s3Config(s))
	require.NoError(t, err)
	rr := openRanged(t, src)
	p := make([]byte, 70000)
	n, err := rr.ReadAt(p, 123457)
	require.NoError(t, err)
	assert.Equal(t, data[123457:123457+n], p[:n])
	n, err = rr.ReadAt(p, int64(len(data))-1000)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, data[len(data)-1000:], p[:n])

	// Replaced: the next ranged read is refused by If-Match, not mixed.
	s.Put(t, "images", "dir/disk.img", testImage(t, 1<<20+4096))
	assertReplacedRefused(t, rr)
}

func TestS3Refusals(t *testing.T) {
	s, ep := s3Fixture(t, testImage(t, 64<<10))
	cases := []struct {
		name    string
		ep      string
		cfg     datasource.Config
		status  int
		message string
	}{
		{"wrong secret", ep, datasource.Config{Access: datasource.Access{Username: s.Access, Password: "wrong"}}, 403, "wrong credentials"},
		// AWS answers 403 InvalidAccessKeyId; versitygw 404 XAdminUserNotFound.
		{"unknown key id", ep, datasource.Config{Access: datasource.Access{Username: "nobody", Password: s.Secret}}, 404, "wrong credentials"},
		{"missing key", "s3+" + s.URL + "/images/nope.img", s3Config(s), 404, "no such object"},
		{"missing bucket", "s3+" + s.URL + "/nobucket/disk.img", s3Config(s), 404, "the bucket does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.RetryBackoff = time.Second
			src, err := datasource.New(c.ep, c.cfg)
			require.NoError(t, err)
			_, err = src.Open(context.Background())
			require.Error(t, err)
			assert.Equal(t, 0, retriesOf(src), "a refusal is not retried")
			var se *errdefs.HTTPStatusError
			require.True(t, errors.As(err, &se), "%v", err)
			assert.Equal(t, c.status, se.StatusCode)
			assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
			assert.Contains(t, err.Error(), c.message)
			assert.NotContains(t, err.Error(), s.Secret)
		})
	}
}

func TestS3EndpointForms(t *testing.T) {
	for _, bad := range []string{"s3://bucket", "s3://bucket/", "s3://bucket/dir/", "s3+https://host/bucket", "s3://b/k?x=1", "s3+https://u:p@host/b/k"} {
		_, err := datasource.New(bad, datasource.Config{})
		assert.ErrorIs(t, err, errdefs.ErrInvalidOptions, bad)
	}
	_, err := datasource.S3URL("s3://b/k", "ftp://x", "")
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	u, err := datasource.S3URL("https://h/x", "http://e", "r")
	require.NoError(t, err)
	assert.Equal(t, "https://h/x", u, "not an S3 endpoint")
}

// TestS3PrivateCA: an https S3 endpoint whose certificate a private CA
// issued is trusted through CertDir (CDI's IMPORTER_CERT_DIR), and refused
// at once without it.
func TestS3PrivateCA(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "s3-test")
	srv := ca.Server("versitygw")
	s := objtest.StartS3TLS(t, srv.CertFile, srv.KeyFile, ca.Pool())
	data := testImage(t, 256<<10)
	s.MakeBucket(t, "images")
	s.Put(t, "images", "disk.img", data)
	certDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(certDir, "ca.pem"), ca.PEM, 0o644))
	ep := "s3+" + s.URL + "/images/disk.img"

	cfg := s3Config(s)
	cfg.CertDir = certDir
	src, err := datasource.New(ep, cfg)
	require.NoError(t, err)
	requireContent(t, src, data)

	cfg = s3Config(s)
	cfg.RetryBackoff = time.Second
	src, err = datasource.New(ep, cfg)
	require.NoError(t, err)
	_, err = src.Open(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
	assert.Zero(t, retriesOf(src), "an untrusted certificate is not retried")
}

// objectStore is a real object-storage server holding one object,
// images/dir/disk.img, for the tests both stores pass alike.
type objectStore struct {
	name string
	// start serves data; url names the object through host (the server's
	// or a proxy's host:port); put replaces it.
	start func(t *testing.T, data []byte) (host string, url func(host string) string, put func(data []byte), cfg datasource.Config)
}

var objectStores = []objectStore{
	{"gcs", func(t *testing.T, data []byte) (string, func(string) string, func([]byte), datasource.Config) {
		g, _ := gcsFixture(t, data)
		return strings.TrimPrefix(g.URL, "http://"), func(h string) string { return "gs+http://" + h + "/images/dir/disk.img" },
			func(b []byte) { g.Upload(t, "images", "dir/disk.img", b) }, gcsConfig
	}},
	{"s3", func(t *testing.T, data []byte) (string, func(string) string, func([]byte), datasource.Config) {
		s, _ := s3Fixture(t, data)
		return strings.TrimPrefix(s.URL, "http://"), func(h string) string { return "s3+http://" + h + "/images/dir/disk.img" },
			func(b []byte) { s.Put(t, "images", "dir/disk.img", b) }, s3Config(s)
	}},
}

// A transfer cut after 1 MiB resumes where it stopped, once, and delivers
// the object whole.
func TestObjectStoreResumesAfterDrop(t *testing.T) {
	for _, o := range objectStores {
		t.Run(o.name, func(t *testing.T) {
			data := testImage(t, 4<<20)
			host, url, _, cfg := o.start(t, data)
			p := objtest.StartProxy(t, host, &objtest.Proxy{DropAfter: 1 << 20})
			src, err := datasource.New(url(p.Addr), cfg)
			require.NoError(t, err)
			_, got, err := readAll(t, src)
			require.NoError(t, err)
			assert.Equal(t, int64(1), p.Drops.Load(), "the proxy cut the transfer")
			assert.Equal(t, 1, retriesOf(src))
			assert.Equal(t, sum(data), sum(got))
		})
	}
}

// An object replaced while the transfer was cut is not resumed into a mix
// of two versions: the transfer fails, having delivered only bytes of the
// first.
func TestObjectStoreObjectReplacedDuringTransfer(t *testing.T) {
	for _, o := range objectStores {
		t.Run(o.name, func(t *testing.T) {
			data := testImage(t, 4<<20)
			host, url, put, cfg := o.start(t, data)
			p := &objtest.Proxy{DropAfter: 1 << 20}
			p.OnDrop = func() { put(testImage(t, 4<<20+4096)) }
			objtest.StartProxy(t, host, p)
			src, err := datasource.New(url(p.Addr), cfg)
			require.NoError(t, err)
			_, got, err := readAll(t, src)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "replaced during the import")
			assert.Less(t, len(got), len(data))
			assert.Equal(t, data[:len(got)], got, "only bytes of the first version were delivered")
		})
	}
}
