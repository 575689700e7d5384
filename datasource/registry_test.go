package datasource_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/regtest"
)

// stringSource is a made-up source kind for the registry tests.
type stringSource struct{ endpoint, text string }

func (s stringSource) String() string { return s.endpoint }

func (s stringSource) Open(context.Context) (*datasource.Transfer, error) {
	return &datasource.Transfer{Body: io.NopCloser(strings.NewReader(s.text)), Size: int64(len(s.text))}, nil
}

func TestRegistryRoutesByScheme(t *testing.T) {
	var got datasource.Config
	r := datasource.Builtin()
	r.Register("mem://", func(endpoint string, c datasource.Config) (datasource.Source, error) {
		got = c
		return stringSource{endpoint: endpoint, text: endpoint[strings.Index(endpoint, "://")+3:]}, nil
	})
	src, err := r.New("MEM://hello", datasource.Config{Access: datasource.Access{Username: "u", Arch: "arm64"}})
	require.NoError(t, err)
	_, data, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(data))
	assert.Equal(t, "u", got.Username, "the opener gets the Config as given")
	assert.Equal(t, "arm64", got.Arch)

	// The package-level New knows only the built-ins.
	_, err = datasource.New("mem://hello", datasource.Config{})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	assert.Equal(t, "mem:// sources are not supported (the sources are docker://, file://, gs+http://, gs+https://, gs://, http://, https://, oci-archive:, oci:, s3+http://, s3+https://, s3://, a local path or - for standard input): invalid options", err.Error())
}

func TestRegistryOpaqueSchemesAndPaths(t *testing.T) {
	r := datasource.Builtin()
	var seen []string
	record := func(key string) datasource.Opener {
		return func(endpoint string, _ datasource.Config) (datasource.Source, error) {
			seen = append(seen, key+" "+endpoint)
			return stringSource{endpoint: endpoint}, nil
		}
	}
	r.Register("oci:", record("oci"))
	r.Register(datasource.PathKey, record("path"))
	r.Register(datasource.StdinKey, record("stdin"))
	for _, ep := range []string{"oci:/x/layout:v1", "oci:///x", "disk:1.img", "http:no-slashes", "./a.img", "-"} {
		_, err := r.New(ep, datasource.Config{})
		require.NoError(t, err, ep)
	}
	assert.Equal(t, []string{
		"oci oci:/x/layout:v1", "oci oci:///x",
		"path disk:1.img", "path http:no-slashes", "path ./a.img", "stdin -",
	}, seen)
}

func TestFileURLNeedsAnAbsolutePath(t *testing.T) {
	_, err := datasource.New("file://relative/x.img", datasource.Config{})
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

// A missing path that reads as a registry reference is told the transport
// it lacks; a missing file name is not.
func TestMissingPathThatLooksLikeARegistryReferenceGetsAHint(t *testing.T) {
	for ref, hint := range map[string]bool{
		"quay.io/containerdisks/fedora:latest":                   true,
		"localhost:5000/disk@sha256:" + strings.Repeat("ab", 32): true,
		"disk.qcow2":             false,
		"images/disk.qcow2":      false,
		"/var/tmp/fedora:latest": false,
	} {
		src, err := datasource.New(ref, datasource.Config{})
		require.NoError(t, err)
		_, err = src.Open(context.Background())
		require.ErrorIs(t, err, errdefs.ErrSourceUnreachable, ref)
		if hint {
			assert.Equal(t, "source file "+ref+" does not exist (an image in a registry is docker://"+ref+")", err.Error())
		} else {
			assert.Equal(t, "source file "+ref+" does not exist", err.Error())
		}
	}
}

// Each built-in source declares what its bytes allow in the Transfer it
// opens: a file its path, a pipe and standard input that they are read
// once, an HTTP answer that it is one (and its ranges when the server
// serves them), a registry layer nothing beyond a stream that can be
// pulled again.
func TestSourcesDeclareTheirCapabilities(t *testing.T) {
	data := testImage(t, 64<<10)
	file := writeTemp(t, data)
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, exec.Command("mkfifo", fifo).Run())
	ranged := newServer(t, serveBytes(data))
	plain := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(data) }))
	img := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Zstd, regtest.File{Name: "disk/disk.img", Data: data}))
	layout, _ := regtest.OCILayout(t, img, "v1")
	conf, auth := regtest.Hermetic(t)

	newHTTP := func(u string) datasource.Source {
		s, err := datasource.NewHTTP(u, datasource.Config{})
		require.NoError(t, err)
		return s
	}
	registry, err := datasource.NewContainerImage("oci:"+layout+":v1", datasource.Config{Access: datasource.Access{RegistriesConf: conf, AuthFile: auth}})
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		src       datasource.Source
		want      datasource.Capabilities
		rangesURL string
	}{
		{"regular file", datasource.NewFile(file), datasource.Capabilities{LocalPath: file}, ""},
		{"pipe", datasource.NewFile(fifo), datasource.Capabilities{OneTime: true}, ""},
		{"standard input", datasource.NewReader("-", bytes.NewReader(data)), datasource.Capabilities{OneTime: true}, ""},
		{"HTTP with ranges", newHTTP(ranged.URL + "/disk.img"), datasource.Capabilities{HTTPAnswer: true}, ranged.URL + "/disk.img"},
		{"HTTP without ranges", newHTTP(plain.URL + "/disk.img"), datasource.Capabilities{HTTPAnswer: true}, ""},
		{"registry layer", registry, datasource.Capabilities{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.src.String() == fifo {
				go func() {
					if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
						f.Write(data)
						f.Close()
					}
				}()
			}
			st, got, err := readAll(t, c.src)
			require.NoError(t, err)
			assert.Equal(t, data, got)
			caps := st.Capabilities
			if c.rangesURL == "" {
				assert.Nil(t, caps.Ranges)
			} else if assert.NotNil(t, caps.Ranges) {
				assert.Equal(t, c.rangesURL, caps.Ranges.URL)
				assert.EqualValues(t, len(data), caps.Ranges.Size)
			}
			caps.Ranges = nil
			assert.Equal(t, c.want, caps)
		})
	}
}
