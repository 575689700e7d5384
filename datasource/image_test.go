package datasource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/regtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestDiskEntryName(t *testing.T) {
	for in, want := range map[string]string{"disk/disk.img": "disk/disk.img", "./disk/x.qcow2": "disk/x.qcow2", "/disk/a": "disk/a"} {
		got, ok, err := diskEntryName(in)
		require.NoError(t, err, in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got)
	}
	for _, in := range []string{"disk/", "disk", "etc/passwd", "disk/.wh.disk.img", "diskette/x"} {
		_, ok, err := diskEntryName(in)
		require.NoError(t, err, in)
		assert.False(t, ok, in)
	}
	_, _, err := diskEntryName("disk/../../etc/shadow")
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
}

func TestNewRoutesImageReferences(t *testing.T) {
	for _, ref := range []string{"docker://quay.io/containerdisks/fedora:latest", "oci-archive:/x/image.tar:v1", "oci:/x/layout:v1"} {
		s, err := New(ref, Config{})
		require.NoError(t, err, ref)
		_, ok := s.(Labeler)
		assert.True(t, ok, ref)
	}
	_, err := New("docker://UPPER/bad ref", Config{})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	s, err := New("oci-archive:/nonexistent/image.tar", Config{})
	require.NoError(t, err)
	_, err = s.Open(context.Background())
	require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
}

func TestRegistryRefusesEscapingEntryAndStreamsDisk(t *testing.T) {
	data := []byte("not really a disk, but bytes to compare\n")
	escaping := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Gzip,
		regtest.File{Name: "disk/../../etc/cron.d/x", Data: data}))
	dir, _ := regtest.OCILayout(t, escaping, "v1")
	conf, auth := regtest.Hermetic(t)
	o := Config{Access: Access{RegistriesConf: conf, AuthFile: auth}}
	s, err := NewContainerImage("oci:"+dir+":v1", o)
	require.NoError(t, err)
	_, err = s.Open(context.Background())
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)

	good := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Zstd, regtest.File{Name: "./disk/disk.img", Data: data}))
	dir, _ = regtest.OCILayout(t, good, "v1")
	s, err = NewContainerImage("oci:"+dir+":v1", o)
	require.NoError(t, err)
	st, err := s.Open(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { st.Body.Close() })
	assert.EqualValues(t, len(data), st.Size)
	assert.Empty(t, st.LocalPath)
	got, err := io.ReadAll(st.Body)
	require.NoError(t, err)
	assert.Equal(t, data, got)
}

func TestCrtDirLinksPEM(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.crt"), []byte("y"), 0o644))
	out, cleanup, err := crtDir(dir, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(cleanup)
	assert.NotEqual(t, dir, out)
	for _, n := range []string{"ca-pem.crt", "other.crt"} {
		_, err := os.Stat(filepath.Join(out, n))
		assert.NoError(t, err, n)
	}
	// Only *.crt: used as is.
	dir2 := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir2, "ca.crt"), []byte("x"), 0o644))
	out, _, err = crtDir(dir2, "")
	require.NoError(t, err)
	assert.Equal(t, dir2, out)
}

// resumeDisk is 1.5 MiB of varied content: random blocks (so the gzip
// layer stays about as large), text and a zero hole.
func resumeDisk() []byte {
	rng := rand.New(rand.NewPCG(6, 4))
	var b bytes.Buffer
	for i := range 3 {
		blk := make([]byte, 384<<10)
		for j := range blk {
			blk[j] = byte(rng.Uint32())
		}
		b.Write(blk)
		b.WriteString(strings.Repeat("text block "+string(rune('a'+i))+"\n", 4096))
	}
	b.Write(make([]byte, 128<<10))
	return b.Bytes()
}

// pushResumeImage pushes a one-layer gzip containerdisk and returns its
// docker:// reference, the layer digest and the disk bytes.
func pushResumeImage(t *testing.T, reg *regtest.Registry) (string, v1.Hash, []byte) {
	data := resumeDisk()
	l := regtest.Layer(t, regtest.Gzip, regtest.File{Name: "disk/", Dir: true}, regtest.File{Name: "disk/disk.img", Data: data})
	d, err := l.Digest()
	require.NoError(t, err)
	size, err := l.Size()
	require.NoError(t, err)
	require.Greater(t, size, int64(1<<20), "the blob must be large enough to be cut several times")
	return "docker://" + reg.Push(t, "bench/resume:v1", regtest.Image(t, regtest.Config{}, l), nil), d, data
}

func readRegistry(t *testing.T, ref string, o Config) (Source, []byte, error) {
	conf, auth := regtest.Hermetic(t)
	o.RegistriesConf, o.AuthFile, o.InsecureTLS = conf, auth, true
	s, err := NewContainerImage(ref, o)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	st, err := s.Open(ctx)
	if err != nil {
		return s, nil, err
	}
	t.Cleanup(func() { st.Body.Close() })
	got, err := io.ReadAll(st.Body)
	return s, got, err
}

// droppingRegistry is a test registry holding pushResumeImage's image
// whose layer's transfers are cut after every `after` bytes, times times.
func droppingRegistry(t *testing.T, after int64, times int) (reg *regtest.Registry, ref string, layer v1.Hash, disk []byte) {
	reg = regtest.Start(t, regtest.Options{})
	ref, layer, disk = pushResumeImage(t, reg)
	reg.DropBlob(layer, after, times)
	return reg, ref, layer, disk
}

// One cut: containers/image itself resumes with "Range: bytes=N-", which
// the test registry serves; we do not retry.
func TestRegistryBlobResumedByContainersImage(t *testing.T) {
	reg, ref, d, data := droppingRegistry(t, 300<<10, 1)
	s, got, err := readRegistry(t, ref, Config{Access: Access{RetryBackoff: 10 * time.Millisecond}})
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "content differs after a resumed blob")
	assert.Equal(t, []string{"", "bytes=307200-"}, reg.BlobRanges(d))
	assert.Equal(t, 0, retries(s))
}

// Cuts every 64 KiB, four times: containers/image gives up after its one
// reconnection (too little progress), and our reader fetches the blob
// again, skips what it had and completes with the right content.
func TestRegistryBlobRetriedAfterRepeatedDrops(t *testing.T) {
	reg, ref, d, data := droppingRegistry(t, 64<<10, 4)
	s, got, err := readRegistry(t, ref, Config{Access: Access{RetryBackoff: 10 * time.Millisecond}})
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "content differs after retried blob transfers")
	assert.GreaterOrEqual(t, retries(s), 1)
	ranges := reg.BlobRanges(d)
	t.Logf("blob GETs (Range headers): %q; our retries: %d", ranges, retries(s))
	assert.GreaterOrEqual(t, len(ranges), 4)
}

// A blob that always breaks: bounded retries, then a clear transfer error.
func TestRegistryBlobGivesUpAfterRetries(t *testing.T) {
	_, ref, _, _ := droppingRegistry(t, 64<<10, 1000)
	s, _, err := readRegistry(t, ref, Config{Retries: 2, Access: Access{RetryBackoff: 10 * time.Millisecond}})
	require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "gave up after 2 retries")
	assert.Equal(t, 2, retries(s))
}

// Without our retries (Retries < 0), the repeated drops fail the import:
// the test above depends on the retry layer, not on luck.
func TestRegistryBlobRepeatedDropsFailWithoutRetries(t *testing.T) {
	_, ref, _, _ := droppingRegistry(t, 64<<10, 4)
	_, _, err := readRegistry(t, ref, Config{Retries: -1})
	require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
}

// countingPolicy is p dialling with a Control that counts connect(2)s.
func countingPolicy(deny string) (*EgressPolicy, *atomic.Int32) {
	n := new(atomic.Int32)
	d, err := ParseEgressList(deny)
	if err != nil {
		panic(err)
	}
	return &EgressPolicy{Deny: d, Dialer: &net.Dialer{Timeout: 5 * time.Second,
		Control: func(string, string, syscall.RawConn) error { n.Add(1); return nil }}}, n
}

func requireEgressRefused(t *testing.T, err error, addr, rule string) {
	t.Helper()
	require.ErrorIs(t, err, errdefs.ErrEgressDenied)
	require.ErrorIs(t, err, errdefs.ErrSourceRefused)
	var ee *errdefs.EgressError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, addr, ee.Addr)
	assert.Equal(t, rule, ee.Rule)
}

// containers/image takes no dialer: a pull under a policy goes through the
// relay, whose connections are the policy's (the counting Control sees
// them), and a registry on a denied address is refused without a
// connection and without retries.
func TestRegistryPullUnderEgressPolicy(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	ref, _, data := pushResumeImage(t, reg)

	p, connects := countingPolicy("default")
	_, got, err := readRegistry(t, ref, Config{Access: Access{Egress: p}})
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	assert.Positive(t, connects.Load(), "the pull's connections are made by the policy's dialer")

	p, connects = countingPolicy("127.0.0.0/8")
	s, _, err := readRegistry(t, ref, Config{Access: Access{Egress: p, RetryBackoff: time.Second}})
	requireEgressRefused(t, err, "127.0.0.1", "deny 127.0.0.0/8")
	assert.Zero(t, connects.Load())
	assert.Zero(t, retries(s))
}

// A registry that redirects its blobs to another host (as registries do
// to their storage) cannot send the pull to a denied address: the
// redirect target gets no connection.
func TestRegistryBlobRedirectToDeniedAddress(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	ref, _, data := pushResumeImage(t, reg)
	upstream := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Host})
	blobs, blobConns := testimg.ServeOn(t, "127.0.0.3", upstream)
	front, _ := testimg.ServeOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			http.Redirect(w, r, "http://"+blobs+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		upstream.ServeHTTP(w, r)
	}))
	ref = strings.Replace(ref, reg.Host, front, 1)

	// Without a policy the redirected pull works, so the refusal below is
	// the policy's.
	_, got, err := readRegistry(t, ref, Config{})
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	seen := blobConns.Load()
	require.Positive(t, seen)

	p, _ := countingPolicy("127.0.0.3")
	_, _, err = readRegistry(t, ref, Config{Access: Access{Egress: p, RetryBackoff: time.Second}})
	requireEgressRefused(t, err, "127.0.0.3", "deny 127.0.0.3/32")
	assert.Equal(t, seen, blobConns.Load(), "the denied blob host must get no connection")
}

// The relay serves only clients that know its credentials.
func TestEgressRelayRefusesOtherClients(t *testing.T) {
	r, err := startEgressRelay(&EgressPolicy{})
	require.NoError(t, err)
	t.Cleanup(r.close)
	target, conns := testimg.ServeOn(t, "127.0.0.2", http.NotFoundHandler())
	for _, u := range []*url.URL{
		{Scheme: "socks5", User: url.UserPassword("importer", "guess"), Host: r.ln.Addr().String()},
		{Scheme: "socks5", Host: r.ln.Addr().String()},
	} {
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 5 * time.Second}
		_, err := c.Get("http://" + target + "/")
		require.Error(t, err)
	}
	assert.Zero(t, conns.Load())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(r.url())}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + target + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, int32(1), conns.Load())
}

// Go reads the proxy environment once per process and never proxies
// loopback names, so the pulls run in a child test process with
// HTTP_PROXY and HTTPS_PROXY set and a registry name only the proxy
// serves. A proxy from the environment is used once its address is
// checked: on an allowed address the pull goes through it; on a denied
// one it is refused before any connection.
func TestRegistryPullThroughEnvironmentProxyUnderEgressPolicy(t *testing.T) {
	if ref := os.Getenv("DATASOURCE_EGRESS_PROXY_CHILD_REF"); ref != "" {
		p, _ := countingPolicy("127.0.0.3")
		_, got, err := readRegistry(t, ref, Config{Access: Access{Egress: p, RetryBackoff: time.Second}})
		if want := os.Getenv("DATASOURCE_EGRESS_PROXY_CHILD_REFUSED"); want != "" {
			requireEgressRefused(t, err, "127.0.0.3", "deny 127.0.0.3/32 (proxy "+want+")")
			return
		}
		require.NoError(t, err)
		require.Equal(t, os.Getenv("DATASOURCE_EGRESS_PROXY_CHILD_SHA"), fmt.Sprintf("%x", sha256.Sum256(got)))
		return
	}
	reg := regtest.Start(t, regtest.Options{})
	ref, _, data := pushResumeImage(t, reg)
	ref = strings.Replace(ref, reg.Host, "registry.invalid", 1)
	// A forward proxy for plain http (the pull falls back to http after
	// its https ping is refused: CONNECT is not served).
	forward := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", reg.Host, reg.Host
	}}
	proxyHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect || r.URL.Host != "registry.invalid" {
			http.Error(w, "not proxied", http.StatusForbidden)
			return
		}
		forward.ServeHTTP(w, r)
	})
	allowed, allowedConns := testimg.ServeOn(t, "127.0.0.2", proxyHandler)
	denied, deniedConns := testimg.ServeOn(t, "127.0.0.3", proxyHandler)
	run := func(proxy string, extra ...string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRegistryPullThroughEnvironmentProxyUnderEgressPolicy$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DATASOURCE_EGRESS_PROXY_CHILD_REF="+ref,
			"HTTP_PROXY="+proxy, "http_proxy="+proxy, "HTTPS_PROXY="+proxy, "https_proxy="+proxy, "NO_PROXY=", "no_proxy=")
		cmd.Env = append(cmd.Env, extra...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "child test: %s", out)
	}
	run("http://"+allowed, fmt.Sprintf("DATASOURCE_EGRESS_PROXY_CHILD_SHA=%x", sha256.Sum256(data)))
	assert.Positive(t, allowedConns.Load(), "the pull went through the proxy")
	run("http://"+denied, "DATASOURCE_EGRESS_PROXY_CHILD_REFUSED=http://"+denied)
	assert.Zero(t, deniedConns.Load(), "a denied proxy gets no connection")
}
