package datasource

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestHostAddrReadsWhatInetAtonReads: hosts inet_aton(3) takes for an
// IPv4 address (1 to 4 parts, each decimal, octal or hexadecimal, the
// last filling the bytes left), with trailing dots, and IPv6 literals are
// addresses; everything else (a part too large, a digit of another base,
// five parts, an empty part) is a name.
func TestHostAddrReadsWhatInetAtonReads(t *testing.T) {
	for host, want := range map[string]string{
		"169.254.169.254":     "169.254.169.254",
		"169.254.169.254.":    "169.254.169.254",
		"2852039166":          "169.254.169.254",
		"0xa9fea9fe":          "169.254.169.254",
		"0XA9FEA9FE":          "169.254.169.254",
		"025177524776":        "169.254.169.254",
		"0251.0376.0251.0376": "169.254.169.254",
		"169.254.43518":       "169.254.169.254",
		"169.16689662":        "169.254.169.254",
		"127.1":               "127.0.0.1",
		"0x7f.1":              "127.0.0.1",
		"010.0.0.1":           "8.0.0.1",
		"1.2.3.0xff":          "1.2.3.255",
		"0":                   "0.0.0.0",
		"0x":                  "0.0.0.0",
		"4294967295":          "255.255.255.255",
		"1.2.65535":           "1.2.255.255",
		"::1":                 "::1",
		"[fd00:ec2::254]":     "fd00:ec2::254",
	} {
		a, ok := hostAddr(host)
		if assert.True(t, ok, host) {
			assert.Equal(t, netip.MustParseAddr(want), a, host)
		}
	}
	for _, host := range []string{
		"", ".", "example.com", "metadata.google.internal", "1.2.3.4.5", "08.1.2.3", "09", "0x1g",
		"256.1.1.1", "1.256.1.1", "1.2.256.1", "1.2.3.256", "1.2.65536", "1.16777216", "4294967296",
		"0x100000000", "1..2", ".1.2.3", "-1", "1.2.3.4 ", "+1", "1e3", "a9fea9fe",
	} {
		_, ok := hostAddr(host)
		assert.False(t, ok, host)
	}
}

// TestEgressRelayRefusesIPv4SpellingsOfDeniedAddresses: a registry pull's
// connections go through the relay, which gets the host as a SOCKS domain
// name when Go does not read it as an address; every inet_aton spelling
// of the metadata address is refused as 169.254.169.254 there, and one of
// an allowed address is connected to. Before the fix the relay sent the
// spellings to DNS (host unreachable, not the policy's refusal, checked).
func TestEgressRelayRefusesIPv4SpellingsOfDeniedAddresses(t *testing.T) {
	r, err := startEgressRelay(&EgressPolicy{Deny: DefaultEgressDeny()})
	require.NoError(t, err)
	t.Cleanup(r.close)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(r.url())}, Timeout: 5 * time.Second}
	for _, host := range []string{"2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "169.254.169.254."} {
		_, err := c.Get("http://" + host + "/latest/meta-data/")
		require.Error(t, err, host)
		err = r.explain(err)
		assert.ErrorIs(t, err, errdefs.ErrEgressDenied, host)
		assert.Contains(t, err.Error(), host+" resolves to 169.254.169.254 (deny 169.254.0.0/16)", host)
	}
	target, conns := testimg.ServeOn(t, "127.0.0.2", http.NotFoundHandler())
	_, port, err := net.SplitHostPort(target)
	require.NoError(t, err)
	resp, err := c.Get("http://" + net.JoinHostPort("2130706434", port) + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, int32(1), conns.Load())
}

// TestEgressPullThroughEnvironmentProxyRefusesIPv4Spellings: a registry
// pull through the environment's proxy asks the proxy for its target
// once the target is checked: every inet_aton spelling of the metadata
// address is refused as 169.254.169.254 there, before containers/image
// connects to the proxy. Go reads the proxy environment once per
// process, so the check runs in a child test process with HTTPS_PROXY
// set. Before the fix the proxy was handed every spelling (checked).
func TestEgressPullThroughEnvironmentProxyRefusesIPv4Spellings(t *testing.T) {
	hosts := []string{"2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "169.254.169.254."}
	if os.Getenv("DATASOURCE_EGRESS_SPELLING_CHILD") != "" {
		r, err := startEgressRelay(&EgressPolicy{Deny: DefaultEgressDeny()})
		require.NoError(t, err)
		t.Cleanup(r.close)
		for _, host := range hosts {
			pu, err := r.dockerProxy(&url.URL{Scheme: "https", Host: host, Path: "/v2/"})
			require.Error(t, err, "%s handed to proxy %v", host, pu)
			assert.ErrorIs(t, err, errdefs.ErrEgressDenied, host)
			assert.Contains(t, err.Error(), host+" resolves to 169.254.169.254 (deny 169.254.0.0/16)")
		}
		return
	}
	proxy, conns := testimg.ServeOn(t, "127.0.0.2", http.NotFoundHandler())
	cmd := exec.Command(os.Args[0], "-test.run=^TestEgressPullThroughEnvironmentProxyRefusesIPv4Spellings$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DATASOURCE_EGRESS_SPELLING_CHILD=1",
		"HTTP_PROXY=http://"+proxy, "http_proxy=http://"+proxy, "HTTPS_PROXY=http://"+proxy, "https_proxy=http://"+proxy, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child test: %s", out)
	assert.Zero(t, conns.Load(), "the proxy gets no connection")
}
