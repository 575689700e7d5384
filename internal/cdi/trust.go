package cdi

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

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
