package datasource_test

import (
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
)

// metadataSpellings are 169.254.169.254 as inet_aton (Squid, curl, glibc's
// resolver) reads them, and with a trailing dot.
var metadataSpellings = []string{
	"2852039166",          // one 32-bit part
	"2852039166.",         // and a trailing dot
	"0xa9fea9fe",          // hexadecimal
	"0XA9FEA9FE",          // upper case
	"025177524776",        // octal
	"0251.0376.0251.0376", // octal parts
	"0xa9.0xfe.0xa9.0xfe", // hexadecimal parts
	"169.0xfe.0251.254",   // mixed
	"169.254.43518",       // a.b.c, c of 16 bits
	"169.16689662",        // a.b, b of 24 bits
	"0xa9.0xfea9fe",       // a.b in hexadecimal
	"169.254.169.254.",    // trailing dot
}

// TestEgressDenyListSeesEveryIPv4Spelling: every spelling of the metadata
// address is refused by the default deny list as 169.254.169.254, naming
// the spelling: directly before any connection, and through a proxy
// before the proxy is asked (Squid and curl would connect inet_aton's
// spellings to the metadata service). Spellings of an allowed address are
// connected to as that address. Before the fix the proxy was asked for
// every spelling but the canonical ones, and a direct request sent the
// spelling to DNS (checked).
func TestEgressDenyListSeesEveryIPv4Spelling(t *testing.T) {
	data := testImage(t, 16<<10)
	var proxied atomic.Int32
	proxy := mustServeAlias(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		serveBytes(data)(w, r)
	}))
	var connects atomic.Int32
	policy := &datasource.EgressPolicy{Deny: datasource.DefaultEgressDeny(), Dialer: &net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			if address != proxy.addr {
				connects.Add(1)
			}
			return nil
		},
	}}
	viaProxy := egressConfig(policy)
	viaProxy.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy.addr})
	for _, host := range metadataSpellings {
		t.Run(host, func(t *testing.T) {
			_, _, err := fetch(t, "http://"+host+"/latest/meta-data/", egressConfig(policy))
			requireRefused(t, err, "169.254.169.254", "deny 169.254.0.0/16")
			assert.Contains(t, err.Error(), host+" resolves to 169.254.169.254")
			_, _, err = fetch(t, "http://"+host+"/latest/meta-data/", viaProxy)
			requireRefused(t, err, "169.254.169.254", "deny 169.254.0.0/16, asked of proxy http://"+proxy.addr)
			assert.Contains(t, err.Error(), host+" resolves to 169.254.169.254")
		})
	}
	assert.Zero(t, connects.Load(), "no connection but to the proxy")
	assert.Zero(t, proxied.Load(), "the proxy was asked for nothing")

	_, port, err := net.SplitHostPort(mustServeAlias(t, "127.0.0.2", serveBytes(data)).addr)
	require.NoError(t, err)
	for _, host := range []string{"2130706434", "0x7f000002", "127.2", "0177.0.0.02", "127.0.0.2."} {
		_, got, err := fetch(t, "http://"+net.JoinHostPort(host, port)+"/disk.img", egressConfig(policy))
		require.NoError(t, err, host)
		assert.Equal(t, sum(data), sum(got), host)
	}
}
