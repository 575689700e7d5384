package uploadserver_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

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
	status, answer := postRecords(t, url, "0123456789abcdef", &body)
	require.Equal(t, http.StatusOK, status, answer)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(src, got), "the target is the source")
	assert.Equal(t, digest.String(), testimg.ContentDigest(t, dst))
}

// postRecords POSTs a sparse-v2 body of bare records of session and
// returns the answer's status and text; status 0 when the request failed.
func postRecords(t *testing.T, url, session string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+uploadserver.PathUpload, body)
	require.NoError(t, err)
	req.Header.Set(uploadserver.HeaderContentType, uploadserver.ContentTypeBlockdeviceClone)
	req.Header.Set(cloner.ProtocolHeader, cloner.ProtocolSparseV2)
	req.Header.Set(cloner.FramingHeader, cloner.FramingRecords)
	req.Header.Set(cloner.SessionHeader, session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(answer)
}

// A connection that fails inside a data record, while the import reads
// the record's bytes straight off it into the target's chunks, leaves
// the record not taken: the server holds the session at the record's
// start, and the resumed request's records from there make the target
// the source, byte for byte.
func TestACutInsideADataRecordResumesFromItsStart(t *testing.T) {
	const mib = 1 << 20
	src := testimg.RandomBytes(8*mib, 47)
	clear(src[6*mib:])
	sum := blkhash.New(0)
	_, _ = sum.Write(src)
	dst := filepath.Join(t.TempDir(), "disk.img")
	_, url := serve(t, uploadserver.Options{Import: importer.Options{Target: dst}, CloneResumeWindow: time.Minute})
	const session = "cut-inside-a-record"

	var first bytes.Buffer
	enc := cloner.NewRecordsEncoder(&first)
	for _, err := range []error{enc.Start(int64(len(src)), 0), enc.Data(0, src[:3*mib]), enc.Data(3*mib, src[3*mib:6*mib])} {
		require.NoError(t, err)
	}
	// The second record's head and its first MiB, then the connection fails.
	cut := io.MultiReader(bytes.NewReader(first.Bytes()[:first.Len()-2*mib]), errAfter{})
	status, answer := postRecords(t, url, session, cut)
	require.NotEqual(t, http.StatusOK, status, answer)

	var offset int64 = -1
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		req, err := http.NewRequest(http.MethodHead, url+uploadserver.PathUpload, nil)
		require.NoError(t, err)
		req.Header.Set(cloner.SessionHeader, session)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		if v := resp.Header.Get(cloner.OffsetHeader); v != "" {
			offset, err = strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			break
		}
	}
	require.Equal(t, int64(3*mib), offset, "the session resumes where the cut record starts")

	var rest bytes.Buffer
	enc = cloner.NewRecordsEncoder(&rest)
	for _, err := range []error{
		enc.Start(int64(len(src)), offset), enc.Data(3*mib, src[3*mib:6*mib]), enc.Zero(6*mib, 2*mib), enc.End(sum.Sum()),
	} {
		require.NoError(t, err)
	}
	status, answer = postRecords(t, url, session, &rest)
	require.Equal(t, http.StatusOK, status, answer)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(src, got), "the target is the source")
}

// errAfter is a request body's reader that fails: the client drops the
// request mid-body.
type errAfter struct{}

func (errAfter) Read([]byte) (int, error) { return 0, errors.New("the cloner's source failed") }
