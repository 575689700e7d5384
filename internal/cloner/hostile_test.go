package cloner_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// record is one sparse-v2 record head as the wire has it: a kind byte and
// two big-endian 64-bit fields, any value (the Encoder only writes sane ones).
func record(kind byte, a, b uint64) []byte {
	r := make([]byte, 17)
	r[0] = kind
	binary.BigEndian.PutUint64(r[1:], a)
	binary.BigEndian.PutUint64(r[9:], b)
	return r
}

// sparseBody is an s2 stream of the given raw record bytes.
func sparseBody(t *testing.T, parts ...[]byte) []byte {
	var buf bytes.Buffer
	sw := s2.NewWriter(&buf)
	for _, p := range parts {
		_, err := sw.Write(p)
		require.NoError(t, err)
	}
	require.NoError(t, sw.Close())
	return buf.Bytes()
}

// postSparse sends body as one sparse-v2 request of session and returns the
// answer's status and text.
func postSparse(ctx context.Context, t *testing.T, p *pki, url, session string, body io.Reader) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	require.NoError(t, err)
	req.Header.Set(uploadserver.HeaderContentType, cloner.ContentTypeBlock)
	req.Header.Set(cloner.ProtocolHeader, cloner.ProtocolSparseV2)
	req.Header.Set(cloner.SessionHeader, session)
	resp, err := p.clientFor(t, &p.client).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(text), nil
}

// serverStatus is the upload server's GET status.
func serverStatus(t *testing.T, p *pki, s *served) uploadserver.Status {
	resp, err := p.clientFor(t, &p.client).Get("https://" + s.addr + uploadserver.PathStatus)
	require.NoError(t, err)
	defer resp.Body.Close()
	var st uploadserver.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// waitStatus polls the server's status until ok, for a minute at most (it
// returns as soon as ok holds; the bound is only for a server that never
// gets there, far past any machine's slowness).
func waitStatus(t *testing.T, p *pki, s *served, what string, ok func(uploadserver.Status) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st := serverStatus(t, p, s)
		if ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s; status %+v", what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHostileSparseRecordsAreRefusedQuickly sends records whose lengths and
// offsets do not fit the announced size (one wrapping past 2^63): each is
// answered 400, and the server then takes a good clone. The answer itself
// is the proof (the wrapping run took for ever before); the request's
// minute only keeps a regression from hanging the package.
// Without overflow-safe bounds the wrapping zero run made the receiver hash
// zeros for ever and answer every later upload 409.
func TestHostileSparseRecordsAreRefusedQuickly(t *testing.T) {
	const size = 8 * mib
	data := bytes.Repeat([]byte{0xab}, 64<<10)
	dataRecord := append(record('D', 0, uint64(len(data))), data...)
	start := record('S', size, 0)
	cases := []struct {
		name  string
		parts [][]byte
		says  string
	}{
		{"zero run whose end wraps past 2^63", [][]byte{start, dataRecord, record('Z', uint64(len(data)), math.MaxInt64-1000)}, "passes the source's"},
		{"data run whose end wraps past 2^63", [][]byte{start, dataRecord, record('D', uint64(len(data)), math.MaxUint64-10)}, "negative field"},
		{"zero run beyond the size", [][]byte{start, record('Z', 0, size+1)}, "passes the source's"},
		{"data run beyond the size", [][]byte{record('S', 1000, 0), dataRecord}, "passes the source's"},
		{"negative length", [][]byte{start, record('Z', 0, math.MaxUint64)}, "negative field"},
		{"negative offset", [][]byte{start, record('Z', 1<<63, 10)}, "negative field"},
		{"negative size", [][]byte{record('S', 1<<63, 0)}, "negative field"},
		{"huge data length", [][]byte{start, record('D', 0, 1<<40)}, "data record of"},
		{"new session starting beyond the size", [][]byte{record('S', size, size+1)}, "cannot resume"},
		{"record out of order", [][]byte{start, dataRecord, record('Z', 0, 10)}, "expected"},
	}
	p := newPKI(t)
	dst := filepath.Join(t.TempDir(), "disk.img")
	s := startServer(t, p, importer.Options{Target: dst})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code, text, err := postSparse(ctx, t, p, s.url(""), "hostile", bytes.NewReader(sparseBody(t, tc.parts...)))
			require.NoError(t, err, "no answer within a minute")
			assert.Equal(t, http.StatusBadRequest, code, text)
			assert.Contains(t, text, tc.says)
			assert.False(t, serverStatus(t, p, s).Busy, "the server is still busy with the refused clone")
		})
	}
	cloneSucceeds(t, p, s, dst, 23, "a good clone after the hostile ones")
}

// leaveMidBody posts parts, Snappy-framed, as one sparse-v2 request of
// session, waits until the server has received all of it, and goes away
// without ending the body or reading the answer.
func leaveMidBody(t *testing.T, p *pki, s *served, session string, parts ...[]byte) {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		_, _, _ = postSparse(ctx, t, p, s.url(""), session, pr)
	}()
	var sent atomic.Int64
	sw := s2.NewWriter(iostage.NewWriteCounter(pw, &sent))
	for _, part := range parts {
		_, err := sw.Write(part)
		require.NoError(t, err)
	}
	require.NoError(t, sw.Flush())
	waitStatus(t, p, s, "the server to receive every record sent", func(st uploadserver.Status) bool { return st.Bytes >= sent.Load() })
	cancel() // the client goes away, the body never ends
	pw.CloseWithError(context.Canceled)
	<-answered
}

// cloneSucceeds clones a new 2 MiB image (seeded) to the server and
// checks it arrived at dst whole.
func cloneSucceeds(t *testing.T, p *pki, s *served, dst string, seed uint64, what string) {
	t.Helper()
	img := testimg.Raw(t, t.TempDir(), "source.img", 2*mib, seed)
	_, err := send(t, p, s.url(""), cloner.ContentTypeBlock, img, cloner.ProtocolSparseV2)
	require.NoError(t, err, what)
	_, serr := s.wait(t)
	require.NoError(t, serr)
	assert.Equal(t, fileSHA(t, img), fileSHA(t, dst))
}

// TestSparseClientThatLeavesFreesTheServer: a client that sends a wrapping
// zero run and hangs up without reading the answer leaves the server free
// for the next clone.
func TestSparseClientThatLeavesFreesTheServer(t *testing.T) {
	p := newPKI(t)
	dst := filepath.Join(t.TempDir(), "disk.img")
	s := startServer(t, p, importer.Options{Target: dst})
	data := bytes.Repeat([]byte{0x5a}, 64<<10)
	leaveMidBody(t, p, s, "leaves", record('S', 4*mib, 0), record('D', 0, uint64(len(data))), data, record('Z', uint64(len(data)), math.MaxInt64-7))
	waitStatus(t, p, s, "the server free after the client left", func(st uploadserver.Status) bool { return !st.Busy })
	cloneSucceeds(t, p, s, dst, 29, "the next clone is refused")
}

// TestNewSparseSessionEndsAnInterruptedOne: a client that leaves in the
// middle of a good sparse-v2 clone does not hold the server for the
// resume window against a new session (a restarted cloner has a new one):
// the newcomer is taken at once and the interrupted session is dropped.
// The server's window is an hour, so a newcomer that waited for it would
// fail the clone's wait, not a stopwatch.
func TestNewSparseSessionEndsAnInterruptedOne(t *testing.T) {
	p := newPKI(t)
	dst := filepath.Join(t.TempDir(), "disk.img")
	s := startServer(t, p, importer.Options{Target: dst})
	data := bytes.Repeat([]byte{0x3c}, 64<<10)
	leaveMidBody(t, p, s, "interrupted", record('S', 4*mib, 0), record('D', 0, uint64(len(data))), data)
	waitStatus(t, p, s, "the session kept for its resumption", func(st uploadserver.Status) bool { return st.Phase == "Interrupted" })

	cloneSucceeds(t, p, s, dst, 43, "the new session is refused while the interrupted one waits")
}
