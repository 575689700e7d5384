package datasource_test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/regtest"
)

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
