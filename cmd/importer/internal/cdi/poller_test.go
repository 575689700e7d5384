package cdi

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/kubeapitest"
	"github.com/diskimport/engine/internal/testkit/regtest"
)

// pollerPod is the poller's pod: the service account's token and CA
// where the kubelet mounts them, KUBERNETES_SERVICE_HOST and _PORT naming
// the API server, and env for the rest.
type pollerPod struct {
	paths Paths
	env   map[string]string
}

func newPollerPod(t *testing.T, api *kubeapitest.Server) *pollerPod {
	prefix := t.TempDir()
	p := &pollerPod{env: map[string]string{}}
	p.paths = PathsFromEnv(func(k string) string {
		if k == "IMPORTER_PATH_PREFIX" {
			return prefix
		}
		return ""
	})
	require.NoError(t, os.MkdirAll(p.paths.ServiceAccount, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(p.paths.ServiceAccount, "token"), []byte(api.Token+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(p.paths.ServiceAccount, "ca.crt"), api.CAPEM, 0o644))
	p.env["KUBERNETES_SERVICE_HOST"], p.env["KUBERNETES_SERVICE_PORT"] = api.Host, api.Port
	p.env["CONTAINERS_REGISTRIES_CONF"], p.env["REGISTRY_AUTH_FILE"] = regtest.Hermetic(t)
	p.env["IMPORTER_PROXY_CERT_DIR"] = filepath.Join(prefix, "no-proxy-certs")
	return p
}

func (p *pollerPod) run(t *testing.T, args ...string) (code int, message, output string) {
	var out bytes.Buffer
	code = RunSourceUpdatePoller(context.Background(), args, func(k string) string { return p.env[k] }, p.paths, slog.New(slog.NewTextHandler(&out, nil)), &out)
	b, _ := os.ReadFile(p.paths.TerminationLog)
	return code, string(b), out.String()
}

// pushDisk pushes a containerdisk holding data to repo and returns its
// manifest digest, as the registry computed it.
func pushDisk(t *testing.T, reg *regtest.Registry, repo string, data []byte) string {
	img := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Gzip, regtest.File{Name: "disk/", Dir: true}, regtest.File{Name: "disk/disk.img", Data: data}))
	reg.Push(t, repo, img, nil)
	d, err := img.Digest()
	require.NoError(t, err)
	return d.String()
}

func TestPollerRecordsTheDigestAndPicksUpANewOne(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	first := pushDisk(t, reg, "golden/fedora:latest", bytes.Repeat([]byte{1}, 4096))
	api := kubeapitest.Start(t, "golden", "fedora-cron", map[string]string{"cdi.kubevirt.io/storage.import.imports": "x"})
	pod := newPollerPod(t, api)
	pod.env["INSECURE_TLS"] = "true" // the registry speaks plain HTTP: CDI's insecureRegistries
	args := []string{"-ns", "golden", "-cron", "fedora-cron", "-url", "docker://" + reg.Host + "/golden/fedora:latest"}

	before := time.Now().UTC().Truncate(time.Second)
	code, msg, out := pod.run(t, args...)
	require.Equal(t, ExitOK, code, out)
	ann, reqs := api.State()
	assert.Equal(t, first, ann[AnnSourceDesiredDigest], "the manifest digest is recorded")
	assert.Equal(t, "x", ann["cdi.kubevirt.io/storage.import.imports"], "other annotations are kept")
	polled, err := time.Parse(time.RFC3339, ann[AnnLastCronTime])
	require.NoError(t, err)
	assert.False(t, polled.Before(before), "lastCronTime %v is this poll's", polled)
	require.Len(t, reqs, 2)
	assert.Equal(t, "GET", reqs[0].Method)
	assert.Equal(t, "PATCH", reqs[1].Method)
	assert.Equal(t, "Bearer "+api.Token, reqs[1].Authorization, "the service account's token")
	assert.Equal(t, "application/json-patch+json", reqs[1].ContentType, "a JSON patch, as CDI's poller sends")
	assert.Contains(t, string(reqs[1].Body), `"path":"/metadata/annotations/cdi.kubevirt.io~1storage.import.sourceDesiredDigest"`)
	assert.Contains(t, msg, first)

	// The same digest again: only the time is patched.
	code, msg, out = pod.run(t, args...)
	require.Equal(t, ExitOK, code, out)
	_, reqs = api.State()
	assert.NotContains(t, string(reqs[3].Body), "sourceDesiredDigest", "an unchanged digest is not patched again")
	assert.Contains(t, msg, "unchanged")

	// A new image under the tag: the next poll records its digest.
	second := pushDisk(t, reg, "golden/fedora:latest", bytes.Repeat([]byte{2}, 4096))
	require.NotEqual(t, first, second)
	code, _, out = pod.run(t, args...)
	require.Equal(t, ExitOK, code, out)
	ann, _ = api.State()
	assert.Equal(t, second, ann[AnnSourceDesiredDigest], "the new digest is recorded")
}

func TestPollerAddsTheAnnotationsToACronWithNone(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	want := pushDisk(t, reg, "d/cd:v1", bytes.Repeat([]byte{3}, 4096))
	api := kubeapitest.Start(t, "ns", "c", nil)
	pod := newPollerPod(t, api)
	pod.env["INSECURE_TLS"] = "true"
	code, _, out := pod.run(t, "-ns", "ns", "-cron", "c", "-url", "docker://"+reg.Host+"/d/cd:v1")
	require.Equal(t, ExitOK, code, out)
	ann, _ := api.State()
	assert.Equal(t, want, ann[AnnSourceDesiredDigest])
	assert.NotEmpty(t, ann[AnnLastCronTime])
}

func TestPollerTLSRegistryWithCredentialsAndCertDir(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{TLS: true, User: "puller", Pass: "s3cret"})
	want := pushDisk(t, reg, "private/cd:v1", bytes.Repeat([]byte{4}, 4096))
	api := kubeapitest.Start(t, "ns", "c", map[string]string{})
	pod := newPollerPod(t, api)
	args := []string{"-ns", "ns", "-cron", "c", "-url", "docker://" + reg.Host + "/private/cd:v1", "-certdir", reg.CADir}

	t.Run("the secret's credentials", func(t *testing.T) {
		pod.env["IMPORTER_ACCESS_KEY_ID"], pod.env["IMPORTER_SECRET_KEY"] = "puller", "s3cret"
		code, _, out := pod.run(t, args...)
		require.Equal(t, ExitOK, code, out)
		ann, _ := api.State()
		assert.Equal(t, want, ann[AnnSourceDesiredDigest])
	})
	t.Run("wrong credentials: exit 1, nothing patched", func(t *testing.T) {
		pod.env["IMPORTER_SECRET_KEY"] = "wrong"
		_, before := api.State()
		code, msg, out := pod.run(t, args...)
		assert.Equal(t, ExitFailed, code, out)
		assert.Contains(t, msg, "resolving docker://"+reg.Host)
		assert.NotContains(t, msg+out, "wrong", "the secret is not logged")
		_, after := api.State()
		assert.Len(t, after, len(before), "no request to the API server")
	})
	t.Run("no -certdir: the registry's certificate is not trusted", func(t *testing.T) {
		pod.env["IMPORTER_SECRET_KEY"] = "s3cret"
		code, msg, out := pod.run(t, args[:len(args)-2]...)
		assert.Equal(t, ExitFailed, code, out)
		assert.Contains(t, msg, "certificate")
	})
}

func TestPollerAPIRefusalExits1WithTheAPIsMessage(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	pushDisk(t, reg, "d/cd:v1", bytes.Repeat([]byte{5}, 4096))
	api := kubeapitest.Start(t, "ns", "c", map[string]string{})
	api.Refuse(http.StatusForbidden)
	pod := newPollerPod(t, api)
	pod.env["INSECURE_TLS"] = "true"
	code, msg, out := pod.run(t, "-ns", "ns", "-cron", "c", "-url", "docker://"+reg.Host+"/d/cd:v1")
	assert.Equal(t, ExitFailed, code, out)
	assert.Contains(t, msg, "403 Forbidden")
	assert.Contains(t, msg, "cannot get resource")
}

func TestPollerAPIServerCertificateIsChecked(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	pushDisk(t, reg, "d/cd:v1", bytes.Repeat([]byte{6}, 4096))
	api := kubeapitest.Start(t, "ns", "c", map[string]string{})
	other := kubeapitest.Start(t, "ns", "c", map[string]string{})
	pod := newPollerPod(t, other) // trusts other's certificate, talks to api
	pod.env["KUBERNETES_SERVICE_PORT"] = api.Port
	pod.env["INSECURE_TLS"] = "true" // for the registry only
	code, msg, out := pod.run(t, "-ns", "ns", "-cron", "c", "-url", "docker://"+reg.Host+"/d/cd:v1")
	assert.Equal(t, ExitFailed, code, out)
	assert.Contains(t, msg, "certificate")
	_, reqs := api.State()
	assert.Empty(t, reqs, "nothing reached a server the service account's CA does not vouch for")
}

func TestPollerArgumentsAsCDIsBinary(t *testing.T) {
	api := kubeapitest.Start(t, "ns", "c", nil)
	pod := newPollerPod(t, api)
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"no -url", []string{"-ns", "n", "-cron", "c"}, nil, ExitFailed, "-url, -ns and -cron are required"},
		{"no -cron", []string{"-ns", "n", "-url", "docker://r/x"}, nil, ExitFailed, "-url, -ns and -cron are required"},
		{"an unknown flag", []string{"-ns", "n", "-cron", "c", "-url", "docker://r/x", "-digest"}, nil, ExitUsage, "flag provided but not defined: -digest"},
		{"-h", []string{"-h"}, nil, ExitOK, "Usage of cdi-source-update-poller"},
		{"a kubeconfig", []string{"-ns", "n", "-cron", "c", "-url", "docker://r/x"}, map[string]string{"KUBECONFIG": "/k"}, ExitFailed, "service account"},
		{"not a registry URL", []string{"-ns", "n", "-cron", "c", "-url", "http://r/x"}, nil, ExitFailed, "not a container image reference"},
		{"outside a pod", []string{"-ns", "n", "-cron", "c", "-url", "docker://r/x"}, map[string]string{"KUBERNETES_SERVICE_HOST": ""}, ExitFailed, "KUBERNETES_SERVICE_HOST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			saved := map[string]string{}
			for k, v := range c.env {
				saved[k] = pod.env[k]
				pod.env[k] = v
			}
			defer func() {
				for k, v := range saved {
					pod.env[k] = v
				}
			}()
			code, _, out := pod.run(t, c.args...)
			assert.Equal(t, c.code, code, out)
			assert.Contains(t, out, c.want)
		})
	}
	_, reqs := api.State()
	assert.Empty(t, reqs)
}
