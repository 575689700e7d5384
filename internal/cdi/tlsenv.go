package cdi

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// tlsVersions are TLS_MIN_VERSION's values, the names CDI's components
// take (OpenShift's crypto package: Go's constant names).
var tlsVersions = map[string]uint16{
	"VersionTLS10": tls.VersionTLS10,
	"VersionTLS11": tls.VersionTLS11,
	"VersionTLS12": tls.VersionTLS12,
	"VersionTLS13": tls.VersionTLS13,
}

// openSSLCiphers maps the OpenSSL cipher names of CDI's TLS profiles (what
// the controller puts in TLS_CIPHERS) to Go's suites; Go's own (IANA)
// names are taken too.
var openSSLCiphers = map[string]uint16{
	"ECDHE-ECDSA-AES128-GCM-SHA256": tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-RSA-AES128-GCM-SHA256":   tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-ECDSA-AES256-GCM-SHA384": tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-RSA-AES256-GCM-SHA384":   tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-ECDSA-CHACHA20-POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-RSA-CHACHA20-POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-ECDSA-AES128-SHA256":     tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
	"ECDHE-RSA-AES128-SHA256":       tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256,
	"AES128-GCM-SHA256":             tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
	"AES256-GCM-SHA384":             tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
	"AES128-SHA256":                 tls.TLS_RSA_WITH_AES_128_CBC_SHA256,
	"ECDHE-ECDSA-AES128-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
	"ECDHE-RSA-AES128-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	"ECDHE-ECDSA-AES256-SHA":        tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	"ECDHE-RSA-AES256-SHA":          tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	"AES128-SHA":                    tls.TLS_RSA_WITH_AES_128_CBC_SHA,
	"AES256-SHA":                    tls.TLS_RSA_WITH_AES_256_CBC_SHA,
}

// cipherID returns the suite of a TLS_CIPHERS name.
func cipherID(name string) (uint16, bool) {
	if id, ok := openSSLCiphers[name]; ok {
		return id, true
	}
	for _, s := range tls.CipherSuites() {
		if s.Name == name {
			return s.ID, true
		}
	}
	return 0, false
}

// tlsPolicy reads TLS_MIN_VERSION and TLS_CIPHERS (comma-separated). Empty
// means Go's defaults, with TLS 1.2 at least. Like CDI, a cipher name not
// known is left out (and reported in warnings), since the controller's
// profiles also name suites only OpenSSL has; an unknown version is an
// error, as ignoring it could lower the floor.
func tlsPolicy(getenv func(string) string) (minVersion uint16, ciphers []uint16, warnings []string, err error) {
	minVersion = tls.VersionTLS12
	if v := getenv("TLS_MIN_VERSION"); v != "" {
		var ok bool
		if minVersion, ok = tlsVersions[v]; !ok {
			return 0, nil, nil, fmt.Errorf("TLS_MIN_VERSION=%q: want VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13: %w", v, errdefs.ErrInvalidOptions)
		}
	}
	for _, name := range strings.Split(getenv("TLS_CIPHERS"), ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if id, ok := cipherID(name); ok {
			ciphers = append(ciphers, id)
		} else {
			warnings = append(warnings, fmt.Sprintf("TLS_CIPHERS: %q is not a cipher suite Go offers; left out", name))
		}
	}
	return minVersion, ciphers, warnings, nil
}
