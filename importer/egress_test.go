package importer_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// The ranged route's reads (qemu-img through our NBD export of HTTP
// ranges) are connections of the policy too: they are made by its dialer,
// and a range read redirected to a denied address fails the import with
// the policy's refusal, that address never connected to.
func TestEgressPolicyCoversRangedReads(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 12)
	www := filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	testimg.Convert(t, raw, filepath.Join(www, "disk.vdi"), "vdi")
	files := http.FileServer(http.Dir(www))
	other, otherConns := testimg.ServeOn(t, "127.0.0.3", files)
	base, _ := testimg.ServeOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved.vdi" && r.Header.Get("Range") != "" && !strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") {
			http.Redirect(w, r, "http://"+other+"/disk.vdi", http.StatusFound)
			return
		}
		r.URL.Path = "/disk.vdi"
		files.ServeHTTP(w, r)
	}))
	var connects atomic.Int32
	deny, err := datasource.ParseEgressList("127.0.0.3")
	require.NoError(t, err)
	policy := &importer.EgressPolicy{Deny: deny, Dialer: &net.Dialer{Timeout: 5 * time.Second,
		Control: func(string, string, syscall.RawConn) error { connects.Add(1); return nil }}}

	o := importer.Options{Source: "http://" + base + "/disk.vdi", Target: filepath.Join(t.TempDir(), "disk.img"),
		TargetOptions: importer.TargetOptions{
			ScratchDir:     t.TempDir(),
			NoStreamDecode: true, // the ranged route, not the stream decoder
		}, Logger: testLogger(t), Access: datasource.Access{
			Egress: policy,
		}}
	res, err := importer.Import(context.Background(), o)
	require.NoError(t, err)
	require.Contains(t, res.Phases, importer.PhaseConvert, "the ranged route")
	expectImage(t, raw, o.Target, false)
	assert.GreaterOrEqual(t, connects.Load(), int32(2), "the first GET and the range reads dial through the policy")

	o.Source, o.Target = "http://"+base+"/moved.vdi", filepath.Join(t.TempDir(), "disk.img")
	start := time.Now()
	res, err = importer.Import(context.Background(), o)
	require.ErrorIs(t, err, importer.ErrEgressDenied)
	t.Logf("refused after %v: %v", time.Since(start), err)
	assert.Zero(t, res.Retries, "a policy refusal is not retried")
	assert.Contains(t, err.Error(), "127.0.0.3 (deny 127.0.0.3/32)")
	assert.Zero(t, otherConns.Load(), "the denied address was connected to")
}
