package datasource

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/regtest"
	"github.com/diskimport/engine/internal/testimg"
)

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
	assert.Zero(t, Retries(s))
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
