package cdi

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
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

// trustProxyCerts makes the proxy's CA certificates trusted. The
// controller mounts them at IMPORTER_PROXY_CERT_DIR (/proxycerts/) for
// the proxy named by http_proxy/https_proxy. The engine trusts one
// certificate directory, so when the proxy directory holds any file, a
// directory of links to both sets (the proxy's under a "proxy-" prefix) is
// made and used instead of IMPORTER_CERT_DIR, as CDI's importer pools
// both. The pooled CAs are trusted for the proxy and the server alike: Go's
// transport verifies both with one configuration.
func trustProxyCerts(getenv func(string) string, paths Paths, req *Request) error {
	proxyDir := getenv("IMPORTER_PROXY_CERT_DIR")
	if proxyDir == "" {
		proxyDir = paths.ProxyCerts
	}
	proxyFiles, err := certFiles(proxyDir)
	if err != nil || len(proxyFiles) == 0 {
		return nil // no proxy CA mounted: the usual case
	}
	var serverFiles []string
	if d := req.Import.CertDir; d != "" {
		if serverFiles, err = certFiles(d); err != nil {
			return fmt.Errorf("IMPORTER_CERT_DIR %s: %w: %w", d, err, errdefs.ErrInvalidOptions)
		}
	}
	merged, err := os.MkdirTemp("", "importer-trust-*")
	if err != nil {
		return fmt.Errorf("pooling proxy and server certificates: %w", err)
	}
	req.cleanups = append(req.cleanups, func() { os.RemoveAll(merged) })
	link := func(src, name string) error {
		if err := os.Symlink(src, filepath.Join(merged, name)); err != nil {
			return fmt.Errorf("pooling proxy and server certificates: %w", err)
		}
		return nil
	}
	for _, f := range serverFiles {
		if err := link(f, linkName(filepath.Base(f))); err != nil {
			return err
		}
	}
	for _, f := range proxyFiles {
		if err := link(f, "proxy-"+linkName(filepath.Base(f))); err != nil {
			return err
		}
	}
	req.Import.CertDir = merged
	return nil
}

// certFiles lists the absolute paths of the non-hidden regular files in
// dir, following links (a ConfigMap's keys are links into "..data").
func certFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(abs, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			files = append(files, p)
		}
	}
	return files, nil
}

// linkName is the name a certificate file is linked under: its own, with
// ".crt" added when it has none of the suffixes a registry client reads
// (containers/image loads CAs only from *.crt; a ConfigMap key may be
// "ca-bundle").
func linkName(name string) string {
	for _, suffix := range []string{".crt", ".pem", ".cert", ".key"} {
		if strings.HasSuffix(name, suffix) {
			return name
		}
	}
	return name + ".crt"
}
