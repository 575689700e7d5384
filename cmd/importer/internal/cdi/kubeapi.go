package cdi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// kubeAPI is the Kubernetes API server as a pod reaches it with its
// service account: the token and CA the kubelet mounts, the address in
// KUBERNETES_SERVICE_HOST and _PORT. It makes the two requests the
// DataImportCron poller needs, by hand. Measured when this was written
// (importer built -trimpath -ldflags "-s -w"): the whole poller adds 28
// KiB to the binary (17,129,634 -> 17,158,306 bytes; 12 KB gzipped), the
// same two through k8s.io/client-go's dynamic client 3.3 MiB
// (20,598,946 bytes; 1.29 MB gzipped, +19 %) and client-go, go-spew,
// x/term and x/time to the go.mod every user of the library resolves.
type kubeAPI struct {
	base   *url.URL
	token  string
	client *http.Client
}

// maxAPIResponse bounds what is read of one API answer: a DataImportCron
// is a few kilobytes.
const maxAPIResponse = 4 << 20

// inClusterAPI reads the service account's token and CA from saDir.
// server, when given (-server), replaces the address from the
// environment. The API is never reached through http_proxy/https_proxy,
// which are for the registry.
func inClusterAPI(getenv func(string) string, saDir, server string) (*kubeAPI, error) {
	if server == "" {
		host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod (or give -server)")
		}
		server = "https://" + net.JoinHostPort(host, port)
	}
	base, err := url.Parse(server)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("API server %q: want https://HOST:PORT", server)
	}
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("the service account's token: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("the service account's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", filepath.Join(saDir, "ca.crt"))
	}
	return &kubeAPI{
		base:  base,
		token: strings.TrimSpace(string(token)),
		client: &http.Client{
			Timeout: time.Minute,
			Transport: &http.Transport{
				Proxy:               nil,
				TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
				TLSHandshakeTimeout: 10 * time.Second,
			},
		},
	}, nil
}

// do sends one request; a status other than 2xx is an error with the
// API's own message (its Status object). A 2xx answer is decoded into
// out when out is not nil.
func (k *kubeAPI) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	u := *k.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIResponse))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &st) != nil || st.Message == "" {
			st.Message = strings.TrimSpace(string(b[:min(len(b), 512)]))
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, st.Message)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}
