// Package regtest runs a real container registry on 127.0.0.1 for tests
// (go-containerregistry's pkg/registry, optionally behind TLS with a CA made
// at test time and basic auth) and builds containerdisk images in Go: layers
// holding disk/<name> owned 107:107, gzip, zstd or uncompressed.
package regtest

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Options of a test registry.
type Options struct {
	TLS        bool   // serve https with a certificate from a test CA
	User, Pass string // require basic auth when User is set
}

// Registry is a running test registry.
type Registry struct {
	Host   string // 127.0.0.1:port
	CADir  string // with TLS: a directory holding the CA as ca.pem
	caPool *x509.CertPool
	opts   Options
	mu     sync.Mutex
	bad    map[string]bool // blob digests whose bytes are corrupted on GET
	drops  map[string]*dropRule
	ranges map[string][]string // Range headers of blob GETs, by digest
}

// Start runs a registry until the test ends.
func Start(t testing.TB, o Options) *Registry {
	t.Helper()
	r := &Registry{opts: o, bad: map[string]bool{}, drops: map[string]*dropRule{}, ranges: map[string][]string{}}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h = r.ranging(h)
	h = r.corrupting(h)
	if o.User != "" {
		h = basicAuth(h, o.User, o.Pass)
	}
	srv := httptest.NewUnstartedServer(h)
	if o.TLS {
		cert, caPEM := makeCert(t)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		r.CADir = t.TempDir()
		if err := os.WriteFile(filepath.Join(r.CADir, "ca.pem"), caPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		r.caPool = x509.NewCertPool()
		r.caPool.AppendCertsFromPEM(caPEM)
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(strings.TrimPrefix(srv.URL, "https://"), "http://")
	return r
}

// Corrupt makes every later GET of the blob return it with one byte
// flipped in its middle (the registry still announces the right digest).
func (r *Registry) Corrupt(d v1.Hash) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bad[d.String()] = true
}

func (r *Registry) corrupting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		i := strings.LastIndex(req.URL.Path, "/blobs/")
		if req.Method == http.MethodGet && i >= 0 {
			r.mu.Lock()
			bad := r.bad[req.URL.Path[i+len("/blobs/"):]]
			r.mu.Unlock()
			if bad {
				rec := httptest.NewRecorder()
				next.ServeHTTP(rec, req)
				body := rec.Body.Bytes()
				if len(body) > 0 {
					body[len(body)/2] ^= 0xff
				}
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.Code)
				w.Write(body)
				return
			}
		}
		next.ServeHTTP(w, req)
	})
}

func basicAuth(next http.Handler, user, pass string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="regtest"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// makeCert creates a CA and a server certificate for 127.0.0.1 signed by it.
func makeCert(t testing.TB) (tls.Certificate, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "regtest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	must(t, err)
	ca, err = x509.ParseCertificate(caDER)
	must(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	must(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Push writes an image or index to host/repo:tag and returns the reference
// without transport ("127.0.0.1:port/repo:tag").
func (r *Registry) Push(t testing.TB, repo string, img v1.Image, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host+"/"+repo, name.Insecure)
	must(t, err)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.caPool != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: r.caPool}
	}
	opts := []remote.Option{remote.WithTransport(tr)}
	if r.opts.User != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.opts.User, Password: r.opts.Pass}))
	}
	if idx != nil {
		must(t, remote.WriteIndex(ref, idx, opts...))
	} else {
		must(t, remote.Write(ref, img, opts...))
	}
	return r.Host + "/" + repo
}

// File is one tar entry of a layer. A nil Data with Dir set makes a
// directory; Path reads the content from a file.
type File struct {
	Name string
	Data []byte
	Path string
	Dir  bool
}

// Compression of a built layer.
const (
	Gzip = "gzip"
	Zstd = "zstd"
	None = "none"
)

// Layer builds a layer from files, entries owned 107:107 like a
// containerdisk, compressed as asked.
func Layer(t testing.TB, comp string, files ...File) v1.Layer {
	t.Helper()
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Uid: 107, Gid: 107, Mode: 0o440, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		data := f.Data
		if f.Path != "" {
			var err error
			data, err = os.ReadFile(f.Path)
			must(t, err)
		}
		if f.Dir {
			h.Typeflag, h.Mode = tar.TypeDir, 0o555
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		must(t, tw.WriteHeader(h))
		if !f.Dir {
			_, err := tw.Write(data)
			must(t, err)
		}
	}
	must(t, tw.Close())
	raw := tarBuf.Bytes()
	l := &layer{diffID: hash(raw), media: types.OCIUncompressedLayer, uncompressed: raw, blob: raw}
	switch comp {
	case Gzip:
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, err := zw.Write(raw)
		must(t, err)
		must(t, zw.Close())
		l.blob, l.media = b.Bytes(), types.OCILayer
	case Zstd:
		zw, err := zstd.NewWriter(nil)
		must(t, err)
		l.blob, l.media = zw.EncodeAll(raw, nil), types.OCILayerZStd
	}
	l.digest = hash(l.blob)
	return l
}

func hash(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// layer is a fully in-memory v1.Layer with any media type (ggcr's own
// helpers insist on compressing).
type layer struct {
	digest, diffID     v1.Hash
	media              types.MediaType
	blob, uncompressed []byte
}

func (l *layer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *layer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *layer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}
func (l *layer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.uncompressed)), nil
}
func (l *layer) Size() (int64, error)                { return int64(len(l.blob)), nil }
func (l *layer) MediaType() (types.MediaType, error) { return l.media, nil }

// Config of a built image.
type Config struct {
	Arch   string // default amd64
	Env    []string
	Labels map[string]string
}

// Image builds an OCI image of the layers (bottom first).
func Image(t testing.TB, c Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	must(t, err)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	must(t, err)
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", c.Arch
	if cfg.Architecture == "" {
		cfg.Architecture = "amd64"
	}
	cfg.Config.Env = c.Env
	cfg.Config.Labels = c.Labels
	img, err = mutate.ConfigFile(img, cfg)
	must(t, err)
	return img
}

// Index builds an OCI index of images keyed by architecture (linux).
func Index(t testing.TB, byArch map[string]v1.Image, order ...string) v1.ImageIndex {
	t.Helper()
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range order {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        byArch[arch],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return idx
}

// Hermetic returns a registries.conf (empty) and an auth-file path (not
// created) in a fresh directory, so containers/image reads nothing of the
// host's configuration.
func Hermetic(t testing.TB) (registriesConf, authFile string) {
	t.Helper()
	dir := t.TempDir()
	registriesConf = filepath.Join(dir, "registries.conf")
	must(t, os.WriteFile(registriesConf, nil, 0o644))
	return registriesConf, filepath.Join(dir, "auth.json")
}
