package importer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// objectStore is what the import tests need of an S3 or GCS server: where
// an object is, and how to store one.
type objectStore struct {
	name     string
	endpoint func(host, object string) string // host: 127.0.0.1:port of the server or of a proxy
	host     string
	put      func(t *testing.T, object string, data []byte)
	opts     func(o *importer.Options)
}

// countingFront is a reverse proxy on 127.0.0.1 in front of host
// (host:port) that counts the requests it passes, so a test says "not
// retried" by the count, not by a stopwatch. The Host header stays the
// front's, as the client signed it.
func countingFront(t *testing.T, host string) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: host})
	front := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	return strings.TrimPrefix(front.URL, "http://"), &n
}

// objectImages are the images every object-store import test reads: a
// raw.xz (streamed onto the target), a qcow2 (read over ranges, or through
// scratch with NoRangedRead).
func objectImages(t *testing.T) (raw string, files map[string]string) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw = testimg.Raw(t, dir, "disk.raw", imageSize, 31)
	files = map[string]string{
		"disk.raw.xz": testimg.Compress(t, raw, "xz"),
		"disk.qcow2":  testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"),
	}
	return raw, files
}

func readFile(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

func fileSHA256(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// testObjectStoreImports runs the import cases against one store.
func testObjectStoreImports(t *testing.T, st objectStore) {
	tmp := privateTmp(t)
	raw, files := objectImages(t)
	for name, p := range files {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		st.put(t, "images/"+name, b)
	}
	cases := []struct {
		name, object string
		noRanged     bool
		noDecode     bool
		wantScratch  bool
		wantPhase    importer.Phase
	}{
		{"raw.xz streamed", "disk.raw.xz", false, false, false, importer.PhaseTransferDataFile},
		// NoStreamDecode: onto a file the engine would decode the qcow2 as
		// a stream (the route choice); the ranged route is what is tested.
		{"qcow2 ranged", "disk.qcow2", false, true, false, importer.PhaseConvert},
		{"qcow2 streamed and decoded", "disk.qcow2", true, false, false, importer.PhaseTransferDataFile},
		{"qcow2 streamed to scratch", "disk.qcow2", true, true, true, importer.PhaseTransferScratch},
	}
	for _, c := range cases {
		testimg.ForEachTarget(t, c.name, 8<<20, func(t *testing.T, tg testimg.Target) {
			target := tg.Path
			o := importer.Options{
				Source: st.endpoint(st.host, "images/"+c.object), Target: target, TargetOptions: importer.TargetOptions{
					ScratchDir:     t.TempDir(),
					NoRangedRead:   c.noRanged,
					NoStreamDecode: c.noDecode,
				},
				Logger: testimg.Logger(t),
			}
			// A checksum needs every byte in order, so the ranged case
			// goes without one.
			if ranged := !c.wantScratch && c.wantPhase == importer.PhaseConvert; !ranged {
				o.Checksums = []string{"sha256:" + fileSHA256(t, files[c.object])}
			}
			st.opts(&o)
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			assert.Equal(t, c.wantScratch, res.ScratchUsed, "phases %v", res.Phases)
			assert.Contains(t, res.Phases, c.wantPhase)
			expectImage(t, raw, target, tg.Block)
			assertEmptyDir(t, o.ScratchDir)
			assertNoSocketDir(t, tmp)
		})
	}
	t.Run("read over several connections", func(t *testing.T) {
		big := testimg.Raw(t, t.TempDir(), "big.raw", 18<<20, 9)
		st.put(t, "images/big.raw", readFile(t, big))
		var conns atomic.Int64
		p := objtest.StartProxy(t, st.host, &objtest.Proxy{DropAfter: 1 << 40, OnConn: func(int) { conns.Add(1) }})
		o := importer.Options{
			Source: st.endpoint(p.Addr, "images/big.raw"), Target: filepath.Join(t.TempDir(), "disk.img"),
			Logger: testimg.Logger(t), Access: datasource.Access{
				Connections: 4,
			}, Checksums: []string{"sha256:" + fileSHA256(t, big)},
		}
		st.opts(&o)
		_, err := importer.Import(context.Background(), o)
		require.NoError(t, err)
		expectImage(t, big, o.Target, false)
		assert.GreaterOrEqual(t, conns.Load(), int64(2), "the chunks came over several connections")
	})
	t.Run("checksum mismatch", func(t *testing.T) {
		o := importer.Options{
			Source: st.endpoint(st.host, "images/disk.raw.xz"), Target: filepath.Join(t.TempDir(), "disk.img"),
			TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
			}, Logger: testimg.Logger(t),
			Checksums: []string{"sha256:" + strings.Repeat("0", 64)},
		}
		st.opts(&o)
		_, err := importer.Import(context.Background(), o)
		require.ErrorIs(t, err, importer.ErrChecksumMismatch)
		_, serr := os.Stat(o.Target)
		assert.True(t, os.IsNotExist(serr), "no target is left after a mismatch")
	})
	t.Run("missing object", func(t *testing.T) {
		o := importer.Options{
			Source: st.endpoint(st.host, "images/absent.img"), Target: filepath.Join(t.TempDir(), "disk.img"),
			TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
			}, Logger: testimg.Logger(t), Access: datasource.Access{
				RetryBackoff: time.Second,
			},
		}
		st.opts(&o)
		front, requests := countingFront(t, st.host)
		o.Source = st.endpoint(front, "images/absent.img")
		_, err := importer.Import(context.Background(), o)
		require.ErrorIs(t, err, importer.ErrSourceRefused)
		assert.Contains(t, err.Error(), "404")
		assert.Equal(t, int64(1), requests.Load(), "a missing object is not retried")
	})
	t.Run("connection dropped mid-transfer", func(t *testing.T) {
		for _, c := range []struct{ object string }{{"disk.raw.xz"}, {"disk.qcow2"}} {
			p := objtest.StartProxy(t, st.host, &objtest.Proxy{DropAfter: 300 << 10})
			o := importer.Options{
				Source: st.endpoint(p.Addr, "images/"+c.object), Target: filepath.Join(t.TempDir(), "disk.img"),
				TargetOptions: importer.TargetOptions{
					ScratchDir: t.TempDir(),
				}, Logger: testimg.Logger(t), Access: datasource.Access{
					RetryBackoff: 10 * time.Millisecond,
				},
				Checksums: []string{"sha256:" + fileSHA256(t, files[c.object])},
			}
			st.opts(&o)
			_, err := importer.Import(context.Background(), o)
			require.NoError(t, err, c.object)
			assert.Equal(t, int64(1), p.Drops.Load(), "the proxy cut a transfer of %s", c.object)
			expectImage(t, raw, o.Target, false)
		}
	})
	t.Run("object replaced during the import", func(t *testing.T) {
		other := testimg.Raw(t, t.TempDir(), "other.raw", imageSize, 32)
		otherBytes, err := os.ReadFile(other)
		require.NoError(t, err)
		st.put(t, "images/replaced.raw", readFile(t, raw))
		p := &objtest.Proxy{DropAfter: 1 << 20}
		p.OnDrop = func() { st.put(t, "images/replaced.raw", otherBytes) }
		objtest.StartProxy(t, st.host, p)
		o := importer.Options{
			Source: st.endpoint(p.Addr, "images/replaced.raw"), Target: filepath.Join(t.TempDir(), "disk.img"),
			TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
			}, Logger: testimg.Logger(t), Access: datasource.Access{
				RetryBackoff: 10 * time.Millisecond,
			},
		}
		st.opts(&o)
		_, err = importer.Import(context.Background(), o)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "replaced during the import")
		_, serr := os.Stat(o.Target)
		assert.True(t, os.IsNotExist(serr), "no target is left")
	})
}

func TestS3Imports(t *testing.T) {
	s := objtest.StartS3(t)
	s.MakeBucket(t, "bucket")
	testObjectStoreImports(t, objectStore{
		name:     "s3",
		host:     strings.TrimPrefix(s.URL, "http://"),
		endpoint: func(host, object string) string { return "s3+http://" + host + "/bucket/" + object },
		put:      func(t *testing.T, object string, data []byte) { s.Put(t, "bucket", object, data) },
		opts: func(o *importer.Options) {
			o.Username, o.Password = s.Access, s.Secret
		},
	})
}

func TestS3ImportWrongCredentials(t *testing.T) {
	s := objtest.StartS3(t)
	s.MakeBucket(t, "bucket")
	s.Put(t, "bucket", "disk.img", make([]byte, 1<<20))
	front, requests := countingFront(t, strings.TrimPrefix(s.URL, "http://"))
	_, err := importer.Import(context.Background(), importer.Options{
		Source: "s3+http://" + front + "/bucket/disk.img", Target: filepath.Join(t.TempDir(), "disk.img"),
		Access: datasource.Access{
			Username:     s.Access,
			Password:     "not-the-secret",
			RetryBackoff: time.Second,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrSourceRefused)
	assert.Contains(t, err.Error(), "wrong credentials")
	assert.Contains(t, err.Error(), "SignatureDoesNotMatch")
	assert.Equal(t, int64(1), requests.Load(), "wrong credentials are not retried")
	_, err = importer.Import(context.Background(), importer.Options{
		Source: "s3+" + s.URL + "/nobucket/disk.img", Target: filepath.Join(t.TempDir(), "disk.img"),
		Access: datasource.Access{
			Username: s.Access,
			Password: s.Secret,
		}, Logger: testimg.Logger(t),
	})
	require.ErrorIs(t, err, importer.ErrSourceRefused)
	assert.Contains(t, err.Error(), "the bucket does not exist")
}

func TestGCSImports(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "") // anonymous: fake-gcs-server checks no token
	g := objtest.StartGCS(t, "bucket")
	testObjectStoreImports(t, objectStore{
		name:     "gcs",
		host:     strings.TrimPrefix(g.URL, "http://"),
		endpoint: func(host, object string) string { return "gs+http://" + host + "/bucket/" + object },
		put:      func(t *testing.T, object string, data []byte) { g.Upload(t, "bucket", object, data) },
		opts:     func(*importer.Options) {},
	})
}

// s3:// and gs:// sources reach a server of the caller's through the
// Options' endpoint fields, as --s3-endpoint and --gcs-endpoint do.
func TestObjectStoreEndpointOptions(t *testing.T) {
	disk := append(bytes.Repeat([]byte{0x5a}, 1<<20-2), 0x55, 0xaa)
	s := objtest.StartS3(t)
	s.MakeBucket(t, "bucket")
	s.Put(t, "bucket", "disk.img", disk)
	target := filepath.Join(t.TempDir(), "s3.img")
	_, err := importer.Import(context.Background(), importer.Options{Source: "s3://bucket/disk.img", S3Endpoint: s.URL, S3Region: "us-east-1",
		Access: datasource.Access{
			Username: s.Access,
			Password: s.Secret,
		}, Target: target, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, disk, got)

	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	g := objtest.StartGCS(t, "bucket")
	g.Upload(t, "bucket", "disk.img", disk)
	target = filepath.Join(t.TempDir(), "gcs.img")
	_, err = importer.Import(context.Background(), importer.Options{Source: "gs://bucket/disk.img", GCSEndpoint: g.URL, Target: target, Logger: testimg.Logger(t)})
	require.NoError(t, err)
	got, err = os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, disk, got)
}
