package datasource_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
)

// aliasServer is an HTTP server on one 127.0.0.x address (the whole of
// 127.0.0.0/8 reaches loopback on Linux) that counts the connections it
// accepted.
type aliasServer struct {
	addr     string // ip:port
	accepted atomic.Int32
}

type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// serveAlias serves h on ip:port (port 0: the OS picks).
func serveAlias(t *testing.T, ip string, port int, h http.Handler) (*aliasServer, error) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	s := &aliasServer{addr: ln.Addr().String()}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(countingListener{ln, &s.accepted}) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return s, nil
}

func mustServeAlias(t *testing.T, ip string, h http.Handler) *aliasServer {
	t.Helper()
	s, err := serveAlias(t, ip, 0, h)
	require.NoError(t, err)
	return s
}

// serveAliasPair serves a and b on two addresses and one port, so one
// host name can point at either.
func serveAliasPair(t *testing.T, ipA string, a http.Handler, ipB string, b http.Handler) (sa, sb *aliasServer, port int) {
	t.Helper()
	for range 20 {
		sa = mustServeAlias(t, ipA, a)
		_, p, _ := net.SplitHostPort(sa.addr)
		port, _ = strconv.Atoi(p)
		var err error
		if sb, err = serveAlias(t, ipB, port, b); err == nil {
			return sa, sb, port
		}
	}
	t.Fatal("no port free on both addresses")
	return nil, nil, 0
}

func prefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	p, err := datasource.ParseEgressList(s)
	require.NoError(t, err)
	return p
}

// requireRefused checks err is the policy's refusal of addr by rule.
func requireRefused(t *testing.T, err error, addr, rule string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, errdefs.ErrEgressDenied)
	require.ErrorIs(t, err, errdefs.ErrSourceRefused)
	var ee *errdefs.EgressError
	require.True(t, errors.As(err, &ee), "%v", err)
	assert.Equal(t, addr, ee.Addr)
	assert.Equal(t, rule, ee.Rule)
	assert.Contains(t, err.Error(), addr)
	assert.Contains(t, err.Error(), rule)
}

func egressConfig(p *datasource.EgressPolicy) datasource.Config {
	return datasource.Config{Access: datasource.Access{Egress: p, RetryBackoff: time.Millisecond}, Logger: testLogger()}
}

func fetch(t *testing.T, rawURL string, c datasource.Config) (datasource.Source, []byte, error) {
	t.Helper()
	src, err := datasource.NewHTTP(rawURL, c)
	require.NoError(t, err)
	_, got, err := readAll(t, src)
	return src, got, err
}

// A policy lets an address it allows through and refuses another before
// connecting to it, naming the rule; a policy refusal is not retried. The
// rows: a deny list, an allow list, and a deny that wins over an allow.
func TestEgressPolicyRefusesOnlyWhatItMust(t *testing.T) {
	for _, c := range []struct {
		name        string
		allow, deny string // ParseEgressList's lists ("": none)
		refusedIP   string
		rule        string // what the refusal names
	}{
		{name: "DenyListRefusesItsNetworkOnly", deny: "127.0.0.3/32", refusedIP: "127.0.0.3", rule: "deny 127.0.0.3/32"},
		{name: "AllowListRefusesEverythingElse", allow: "127.0.0.2", refusedIP: "127.0.0.4", rule: "not in allow list 127.0.0.2/32"},
		{name: "DenyWinsOverAllow", allow: "127.0.0.0/8", deny: "127.0.0.3", refusedIP: "127.0.0.3", rule: "deny 127.0.0.3/32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := testImage(t, 64<<10)
			ok := mustServeAlias(t, "127.0.0.2", serveBytes(data))
			refused := mustServeAlias(t, c.refusedIP, serveBytes(data))
			var policy datasource.EgressPolicy
			if c.allow != "" {
				policy.Allow = prefixes(t, c.allow)
			}
			if c.deny != "" {
				policy.Deny = prefixes(t, c.deny)
			}
			conf := egressConfig(&policy)

			_, got, err := fetch(t, "http://"+ok.addr+"/disk.img", conf)
			require.NoError(t, err)
			require.Equal(t, sum(data), sum(got))

			src, _, err := fetch(t, "http://"+refused.addr+"/disk.img", conf)
			requireRefused(t, err, c.refusedIP, c.rule)
			assert.Zero(t, refused.accepted.Load(), "a refused address must not be connected to")
			assert.Zero(t, retriesOf(src), "a policy refusal is not retried")
		})
	}
}

func TestEgressRedirectToDeniedAddressIsRefused(t *testing.T) {
	data := testImage(t, 16<<10)
	denied := mustServeAlias(t, "127.0.0.3", serveBytes(data))
	entry := mustServeAlias(t, "127.0.0.2", http.RedirectHandler("http://"+denied.addr+"/disk.img", http.StatusFound))
	c := egressConfig(&datasource.EgressPolicy{Deny: prefixes(t, "127.0.0.3/32")})

	_, _, err := fetch(t, "http://"+entry.addr+"/disk.img", c)
	requireRefused(t, err, "127.0.0.3", "deny 127.0.0.3/32")
	assert.Equal(t, int32(1), entry.accepted.Load(), "the allowed first hop is reached, once")
	assert.Zero(t, denied.accepted.Load(), "the redirect target must not be connected to")
}

// dnsStandIn answers A queries for every name with answers[i] on its i-th
// A query (the last one from then on), and AAAA queries with no address.
type dnsStandIn struct {
	addr    string
	answers []netip.Addr
	aCount  atomic.Int32
}

func startDNS(t *testing.T, answers ...string) *dnsStandIn {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	d := &dnsStandIn{addr: pc.LocalAddr().String()}
	for _, a := range answers {
		d.answers = append(d.answers, netip.MustParseAddr(a))
	}
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := d.answer(buf[:n]); resp != nil {
				pc.WriteTo(resp, from) //nolint:errcheck // the client retries
			}
		}
	}()
	return d
}

// answer builds the response to one query: the header with QR/RD/RA set,
// the question copied, and for an A query one record pointing back at it.
func (d *dnsStandIn) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		i += int(q[i]) + 1
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	question := q[12 : i+5]
	out := append([]byte(nil), q[:2]...)
	out = append(out, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0)
	out = append(out, question...)
	if qtype != 1 { // A
		return out
	}
	n := int(d.aCount.Add(1)) - 1
	a := d.answers[min(n, len(d.answers)-1)].As4()
	binary.BigEndian.PutUint16(out[6:], 1)
	out = append(out, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
	return append(out, a[:]...)
}

func (d *dnsStandIn) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.addr)
	}}
}

// A name that first resolves to an allowed address and then to a denied
// one (DNS rebinding): each connection is made to the very address that
// was checked, so the denied server is never reached, and the connection
// that resolves to it is refused.
func TestEgressRebindingAnswerCannotBypassTheCheck(t *testing.T) {
	data := testImage(t, 64<<10)
	other := testImage(t, 68<<10)
	allowed, denied, port := serveAliasPair(t, "127.0.0.2", serveBytes(data), "127.0.0.3", serveBytes(other))
	dns := startDNS(t, "127.0.0.2", "127.0.0.3")
	c := egressConfig(&datasource.EgressPolicy{Deny: prefixes(t, "127.0.0.3/32"), Resolver: dns.resolver()})
	src, err := datasource.NewHTTP("http://rebind.example:"+strconv.Itoa(port)+"/disk.img", c)
	require.NoError(t, err)

	_, got, err := readAll(t, src)
	require.NoError(t, err)
	require.Equal(t, sum(data), sum(got), "the bytes come from the address that was checked")
	assert.Equal(t, int32(1), dns.aCount.Load(), "one resolution per connection: the checked answer is the one dialled")

	// The next connection (the source keeps none alive) resolves again.
	_, _, err = readAll(t, src)
	requireRefused(t, err, "127.0.0.3", "deny 127.0.0.3/32")
	assert.Contains(t, err.Error(), "rebind.example resolves to 127.0.0.3")
	assert.Equal(t, int32(1), allowed.accepted.Load())
	assert.Zero(t, denied.accepted.Load(), "the rebound address must never be connected to")
}

// The env-mode defaults refuse the metadata service and link-local
// networks before any connection is attempted: the dialer's Control, which
// runs for every connect(2), is never called, and the refusal is at once.
func TestEgressDefaultDenyRefusesMetadataBeforeConnecting(t *testing.T) {
	var connects atomic.Int32
	p := &datasource.EgressPolicy{Deny: datasource.DefaultEgressDeny(), Dialer: &net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(string, string, syscall.RawConn) error { connects.Add(1); return nil },
	}}
	for _, tc := range []struct{ url, addr, rule string }{
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254", "deny 169.254.0.0/16"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254", "deny fd00:ec2::254/128"},
		{"http://169.254.10.1:8080/disk.img", "169.254.10.1", "deny 169.254.0.0/16"},
		{"http://[fe80::1]/disk.img", "fe80::1", "deny fe80::/10"},
		{"http://[::ffff:169.254.169.254]/", "::ffff:169.254.169.254", "deny 169.254.0.0/16"},
		{"http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe", "deny 169.254.0.0/16"},
		{"http://0.0.0.0:80/", "0.0.0.0", "the unspecified address reaches this host"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			_, _, err := fetch(t, tc.url, egressConfig(p))
			requireRefused(t, err, tc.addr, tc.rule)
		})
	}
	assert.Zero(t, connects.Load(), "no connection may be attempted")

	// The same dialer does connect where the policy allows.
	data := testImage(t, 16<<10)
	ok := mustServeAlias(t, "127.0.0.2", serveBytes(data))
	_, got, err := fetch(t, "http://"+ok.addr+"/disk.img", egressConfig(p))
	require.NoError(t, err)
	require.Equal(t, sum(data), sum(got))
	assert.Equal(t, int32(1), connects.Load())
}

// Through a proxy the connection is to the proxy: its address is checked
// when dialled, and a literal target address is checked before the
// request is handed to it. A target named by host name is the proxy's to
// resolve.
func TestEgressThroughProxy(t *testing.T) {
	data := testImage(t, 16<<10)
	var proxied atomic.Int32
	proxyHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		serveBytes(data)(w, r)
	})
	proxy := mustServeAlias(t, "127.0.0.2", proxyHandler)
	deniedProxy := mustServeAlias(t, "127.0.0.3", proxyHandler)
	via := func(p *aliasServer) datasource.Config {
		c := egressConfig(&datasource.EgressPolicy{Deny: prefixes(t, "127.0.0.3/32,169.254.0.0/16")})
		c.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: p.addr})
		return c
	}

	_, got, err := fetch(t, "http://image.invalid/disk.img", via(proxy))
	require.NoError(t, err)
	require.Equal(t, sum(data), sum(got))
	require.Equal(t, int32(1), proxied.Load())

	_, _, err = fetch(t, "http://169.254.169.254/latest/meta-data/", via(proxy))
	requireRefused(t, err, "169.254.169.254", "deny 169.254.0.0/16, asked of proxy http://"+proxy.addr)
	assert.Equal(t, int32(1), proxied.Load(), "the proxy must not be asked for a denied address")

	_, _, err = fetch(t, "http://image.invalid/disk.img", via(deniedProxy))
	requireRefused(t, err, "127.0.0.3", "deny 127.0.0.3/32")
	assert.Zero(t, deniedProxy.accepted.Load())
}

// S3 and GCS sources are carried by the same transport, token endpoints
// included.
func TestEgressAppliesToObjectStores(t *testing.T) {
	denied := mustServeAlias(t, "127.0.0.3", http.NotFoundHandler())
	c := egressConfig(&datasource.EgressPolicy{Deny: prefixes(t, "127.0.0.3/32")})
	c.Username, c.Password = "AKIDEXAMPLE", "secret"
	for _, ep := range []string{
		"s3+http://" + denied.addr + "/images/disk.img",
		"gs+http://" + denied.addr + "/images/disk.img",
	} {
		src, err := datasource.New(ep, c)
		require.NoError(t, err, ep)
		_, _, err = readAll(t, src)
		requireRefused(t, err, "127.0.0.3", "deny 127.0.0.3/32")
		assert.Zero(t, retriesOf(src), ep)
	}
	assert.Zero(t, denied.accepted.Load())
}

func TestParseEgressList(t *testing.T) {
	got, err := datasource.ParseEgressList("10.0.0.0/8, 192.168.1.7", "::ffff:169.254.0.0/112 fd00::/8", "none")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fd00::/8"),
	}, got)
	got, err = datasource.ParseEgressList("default")
	require.NoError(t, err)
	assert.Equal(t, datasource.DefaultEgressDeny(), got)
	got, err = datasource.ParseEgressList("none")
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.NotNil(t, got)
	for _, bad := range []string{"10.0.0.0/33", "example.com", "fe80::1%eth0"} {
		_, err = datasource.ParseEgressList(bad)
		require.ErrorIs(t, err, errdefs.ErrInvalidOptions, bad)
		assert.Contains(t, err.Error(), fmt.Sprintf("%q", bad))
	}
}

// A GCS key file's token_uri is reached through the same policy: a token
// endpoint on a denied address gets no connection, and neither does the
// object's server, since no token was obtained.
func TestEgressAppliesToGCSTokenEndpoint(t *testing.T) {
	tokens := mustServeAlias(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"access_token":"t","expires_in":3600}`))
	}))
	objects := mustServeAlias(t, "127.0.0.2", http.NotFoundHandler())
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", serviceAccount(t, "http://"+tokens.addr+"/token", key))
	src, err := datasource.New("gs+http://"+objects.addr+"/images/disk.img", egressConfig(&datasource.EgressPolicy{Deny: prefixes(t, "127.0.0.3")}))
	require.NoError(t, err)
	_, _, err = readAll(t, src)
	requireRefused(t, err, "127.0.0.3", "deny 127.0.0.3/32")
	assert.Zero(t, retriesOf(src), "a refused token endpoint is not retried")
	assert.Zero(t, tokens.accepted.Load())
	assert.Zero(t, objects.accepted.Load())
}
