package uploadserver_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// TestBareRecordsBodyClonesTheSource: the server's HEAD answer offers
// bare records, and a sparse-v2 request that says its body is such
// (compressible data packed, random data as it is, a zero run) leaves the
// target byte for byte the source, its content digest the End record's.
func TestBareRecordsBodyClonesTheSource(t *testing.T) {
	const mib = 1 << 20
	src := make([]byte, 6*mib)
	copy(src, bytes.Repeat([]byte("a guest's log line, 0123456789\n"), 2*mib/31))
	copy(src[4*mib:], testimg.RandomBytes(2*mib, 31))
	sum := blkhash.New(0)
	_, _ = sum.Write(src)
	digest := sum.Sum()

	dst := filepath.Join(t.TempDir(), "disk.img")
	_, url := serve(t, uploadserver.Options{Import: importer.Options{Target: dst}})
	head, err := http.Head(url + uploadserver.PathUpload)
	require.NoError(t, err)
	head.Body.Close()
	assert.Equal(t, cloner.FramingRecords, head.Header.Get(cloner.FramingHeader))

	var body bytes.Buffer
	enc := cloner.NewRecordsEncoder(&body)
	for _, err := range []error{
		enc.Start(int64(len(src)), 0), enc.Data(0, src[:2*mib]), enc.Zero(2*mib, 2*mib),
		enc.Data(4*mib, src[4*mib:]), enc.End(digest),
	} {
		require.NoError(t, err)
	}
	assert.Less(t, body.Len(), 3*mib, "the text went packed")
	req, err := http.NewRequest(http.MethodPost, url+uploadserver.PathUpload, &body)
	require.NoError(t, err)
	req.Header.Set(uploadserver.HeaderContentType, uploadserver.ContentTypeBlockdeviceClone)
	req.Header.Set(cloner.ProtocolHeader, cloner.ProtocolSparseV2)
	req.Header.Set(cloner.FramingHeader, cloner.FramingRecords)
	req.Header.Set(cloner.SessionHeader, "0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(answer))
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(src, got), "the target is the source")
	assert.Equal(t, digest.String(), testimg.ContentDigest(t, dst))
}
