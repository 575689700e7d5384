package uploadserver_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// A request that breaks off inside a data record, while the import reads
// the record's bytes straight off it into the target's chunks (its
// connection dropped, or its chunked body broken, the connection alive),
// leaves the record not taken: the server holds the session at the
// record's start, and the resumed request's records from there make the
// target the source, byte for byte.
func TestACutInsideADataRecordResumesFromItsStart(t *testing.T) {
	const mib = 1 << 20
	src := testimg.RandomBytes(8*mib, 47)
	clear(src[6*mib:])
	sum := blkhash.New(0)
	_, _ = sum.Write(src)
	var first bytes.Buffer
	enc := cloner.NewRecordsEncoder(&first)
	for _, err := range []error{enc.Start(int64(len(src)), 0), enc.Data(0, src[:3*mib]), enc.Data(3*mib, src[3*mib:6*mib])} {
		require.NoError(t, err)
	}
	// The second record's head and its first MiB, then the break.
	part := first.Bytes()[:first.Len()-2*mib]
	for name, brk := range map[string]string{"connection dropped": "", "chunked body broken": "\r\nnot a chunk size\r\n"} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "disk.img")
			_, url := serve(t, uploadserver.Options{Import: importer.Options{Target: dst}, CloneResumeWindow: time.Minute})
			const session = "cut-inside-a-record"
			answer := postBrokenOff(t, url, session, part, brk)
			assert.Equal(t, http.StatusInternalServerError, answer.StatusCode)
			req, err := http.NewRequest(http.MethodHead, url+uploadserver.PathUpload, nil)
			require.NoError(t, err)
			req.Header.Set(cloner.SessionHeader, session)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			offset, err := strconv.ParseInt(resp.Header.Get(cloner.OffsetHeader), 10, 64)
			require.NoError(t, err, "the server holds the session")
			require.Equal(t, int64(3*mib), offset, "the session resumes where the cut record starts")

			var rest bytes.Buffer
			enc := cloner.NewRecordsEncoder(&rest)
			for _, err := range []error{
				enc.Start(int64(len(src)), offset), enc.Data(3*mib, src[3*mib:6*mib]), enc.Zero(6*mib, 2*mib), enc.End(sum.Sum()),
			} {
				require.NoError(t, err)
			}
			status, text := postRecords(t, url, session, &rest)
			require.Equal(t, http.StatusOK, status, text)
			got, err := os.ReadFile(dst)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(src, got), "the target is the source")
		})
	}
}

// postBrokenOff sends a sparse-v2 request of session whose chunked body
// is part, then brk (bytes that are no chunk), or with brk "" nothing
// more: the connection's sending half closes, as a cloner's dropped
// connection ends. It returns the server's answer, which comes once the
// server has decided what the broken request leaves.
func postBrokenOff(t *testing.T, url, session string, part []byte, brk string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: cloner\r\n%s: %s\r\n%s: %s\r\n%s: %s\r\n%s: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n",
		uploadserver.PathUpload, uploadserver.HeaderContentType, uploadserver.ContentTypeBlockdeviceClone,
		cloner.ProtocolHeader, cloner.ProtocolSparseV2, cloner.FramingHeader, cloner.FramingRecords,
		cloner.SessionHeader, session, len(part)+1) // one byte more than comes
	_, err = c.Write(append(append([]byte(head), part...), brk...))
	require.NoError(t, err)
	if brk == "" {
		require.NoError(t, c.(*net.TCPConn).CloseWrite())
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
