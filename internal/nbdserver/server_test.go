package nbdserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testData is varied content: random blocks, text and zero holes.
func testData(size int) []byte {
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for off := 0; off < size; off += 64 << 10 {
		end := min(off+64<<10, size)
		switch (off / (64 << 10)) % 3 {
		case 0:
			for i := off; i < end; i++ {
				b[i] = byte(rng.Uint32())
			}
		case 1:
			copy(b[off:end], bytes.Repeat([]byte("the quick brown fox "), (end-off)/20+1))
		}
	}
	return b
}

func needQemu(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed")
	}
}

// start serves export on a unix socket in a temp dir and returns its
// path, the server and a stop function (also run at cleanup).
func start(t *testing.T, export io.ReaderAt, size int64) (string, *Server, func() error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := New(export, size, nil)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	var serr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case serr = <-done:
			case <-time.After(10 * time.Second):
				serr = errors.New("Serve did not return after cancel")
			}
		})
		return serr
	}
	t.Cleanup(func() { stop() })
	return sock, s, stop
}

func spec(sock string) string {
	b, _ := json.Marshal(map[string]any{"file": nbdFile(sock)})
	return "json:" + string(b)
}

func nbdFile(sock string) map[string]any {
	return map[string]any{"driver": "nbd", "server": map[string]any{"type": "unix", "path": sock}}
}

func qemuImg(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "qemu-img", args...).CombinedOutput()
}

// expectReply reads a simple reply from c and checks its magic, error
// number and cookie.
func expectReply(t *testing.T, c net.Conn, cookie uint64, errno uint32) {
	t.Helper()
	rep := make([]byte, 16)
	_, err := io.ReadFull(c, rep)
	require.NoError(t, err)
	assert.Equal(t, uint32(simpleRepMagic), be.Uint32(rep))
	assert.Equal(t, errno, be.Uint32(rep[4:]), "cookie %d", cookie)
	assert.Equal(t, cookie, be.Uint64(rep[8:]))
}

// qcow2Of is data converted by qemu-img to a qcow2 file in a new directory.
func qcow2Of(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "src.raw")
	require.NoError(t, os.WriteFile(raw, data, 0o600))
	qc := filepath.Join(dir, "src.qcow2")
	out, err := qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", raw, qc)
	require.NoError(t, err, "%s", out)
	return qc
}

func TestQemuImgReadsRawExport(t *testing.T) {
	needQemu(t)
	data := testData(5<<20 + 4096 + 17) // not a multiple of anything
	sock, s, stop := start(t, bytes.NewReader(data), int64(len(data)))

	out, err := qemuImg(t, "info", "--output=json", "-f", "raw", spec(sock))
	require.NoError(t, err, "%s", out)
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	require.NoError(t, json.Unmarshal(out, &info))
	// Advertised rounded up to 512 (see New), the padding reads as zeros.
	padded := append(bytes.Clone(data), make([]byte, 512-len(data)%512)...)
	assert.Equal(t, int64(len(padded)), info.VirtualSize)

	dst := filepath.Join(t.TempDir(), "out.raw")
	out, err = qemuImg(t, "convert", "-f", "raw", "-O", "raw", spec(sock), dst)
	require.NoError(t, err, "%s", out)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(padded, got), "converted content differs")
	// The URI form works too.
	out, err = qemuImg(t, "info", "-f", "raw", "nbd+unix:///?socket="+sock)
	require.NoError(t, err, "%s", out)

	assert.NoError(t, s.Err())
	assert.NoError(t, stop())
}

func TestQemuImgReadsQcow2Export(t *testing.T) {
	needQemu(t)
	data := testData(8 << 20)
	qc := qcow2Of(t, data)
	img, err := os.ReadFile(qc)
	require.NoError(t, err)

	sock, s, stop := start(t, bytes.NewReader(img), int64(len(img)))
	b, _ := json.Marshal(map[string]any{"backing": nil, "driver": "qcow2", "file": nbdFile(sock)})
	src := "json:" + string(b)
	dst := filepath.Join(t.TempDir(), "out.raw")
	// -m 16 -W: many requests in flight at once.
	out, err := qemuImg(t, "convert", "-m", "16", "-W", "-O", "raw", src, dst)
	require.NoError(t, err, "%s", out)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "converted content differs")
	assert.NoError(t, s.Err())
	assert.NoError(t, stop())
}

// slowReader delays each read so requests overlap, and counts the peak.
// Until two reads were in flight at once, a read waits (up to 2 s) for
// another to arrive rather than only sleeping, so a loaded machine that
// schedules the client late cannot make requests it sent together look
// sequential.
type slowReader struct {
	r         io.ReaderAt
	cur, peak atomic.Int32
	once      sync.Once
	overlap   chan struct{} // closed once two reads were in flight
}

func newSlowReader(r io.ReaderAt) *slowReader {
	return &slowReader{r: r, overlap: make(chan struct{})}
}

func (s *slowReader) ReadAt(p []byte, off int64) (int, error) {
	n := s.cur.Add(1)
	defer s.cur.Add(-1)
	for {
		pk := s.peak.Load()
		if n <= pk || s.peak.CompareAndSwap(pk, n) {
			break
		}
	}
	if n >= 2 {
		s.once.Do(func() { close(s.overlap) })
	}
	select {
	case <-s.overlap:
	case <-time.After(2 * time.Second):
	}
	time.Sleep(5 * time.Millisecond)
	return s.r.ReadAt(p, off)
}

func TestConcurrentRequests(t *testing.T) {
	needQemu(t)
	data := testData(4 << 20)
	sr := newSlowReader(bytes.NewReader(data))
	sock, s, _ := start(t, sr, int64(len(data)))
	dst := filepath.Join(t.TempDir(), "out.raw")
	// Small requests (-S 4k has no effect on reads; the buffer size does).
	out, err := qemuImg(t, "convert", "-m", "8", "-W", "-f", "raw", "-O", "raw", spec(sock), dst)
	require.NoError(t, err, "%s", out)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got))
	assert.NoError(t, s.Err())
	assert.GreaterOrEqual(t, sr.peak.Load(), int32(2), "reads never overlapped")
	assert.LessOrEqual(t, sr.peak.Load(), int32(DefaultMaxInFlight))
}

// failAt fails reads touching [bad, bad+1).
type failAt struct {
	r   io.ReaderAt
	bad int64
}

var errBackend = errors.New("backend exploded")

func (f failAt) ReadAt(p []byte, off int64) (int, error) {
	if off <= f.bad && f.bad < off+int64(len(p)) {
		return 0, errBackend
	}
	return f.r.ReadAt(p, off)
}

func TestFailingExportGivesEIO(t *testing.T) {
	needQemu(t)
	data := testData(4 << 20)
	sock, s, stop := start(t, failAt{r: bytes.NewReader(data), bad: 3 << 20}, int64(len(data)))
	dst := filepath.Join(t.TempDir(), "out.raw")
	out, err := qemuImg(t, "convert", "-f", "raw", "-O", "raw", spec(sock), dst)
	require.Error(t, err)
	assert.Contains(t, string(out), "Input/output error")
	require.Error(t, s.Err())
	assert.ErrorIs(t, s.Err(), errBackend)
	assert.NoError(t, stop())
}

// blockReader blocks until released, to hold a read in flight at cancel;
// entered is closed when the first read arrives.
type blockReader struct {
	release, entered chan struct{}
	once             *sync.Once
}

func newBlockReader() blockReader {
	return blockReader{release: make(chan struct{}), entered: make(chan struct{}), once: new(sync.Once)}
}

func (b blockReader) ReadAt(p []byte, off int64) (int, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return 0, errors.New("released")
}

func TestCancelStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	data := testData(1 << 20)
	sock, _, stop := start(t, bytes.NewReader(data), int64(len(data)))
	// Raw clients that connect and idle, one mid-handshake.
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("unix", sock)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	// Each has its hello, so each was accepted: a connection still in the
	// listener's backlog when Serve closes it is reset instead.
	for _, c := range conns {
		hello := make([]byte, 18)
		_, err := io.ReadFull(c, hello)
		require.NoError(t, err)
		assert.Equal(t, uint64(nbdMagic), be.Uint64(hello))
		assert.Equal(t, uint64(optMagic), be.Uint64(hello[8:]))
	}

	require.NoError(t, stop())
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(c) // the server closed it: EOF, not a timeout
		assert.NoError(t, err)
		c.Close()
	}
	_, err := net.Dial("unix", sock)
	assert.Error(t, err, "listener still open")
	noLeak(t, before)
}

// negotiate runs a fixed newstyle handshake with NBD_OPT_GO by hand
// against a read-only export.
func negotiate(t *testing.T, c net.Conn) uint64 {
	t.Helper()
	size, flags := negotiateFlags(t, c)
	assert.Equal(t, uint16(transmissionFlags), flags)
	return size
}

// negotiateFlags runs the handshake and returns the export's size and
// transmission flags.
func negotiateFlags(t *testing.T, c net.Conn) (uint64, uint16) {
	t.Helper()
	hello := make([]byte, 18)
	_, err := io.ReadFull(c, hello)
	require.NoError(t, err)
	_, err = c.Write([]byte{0, 0, 0, 3})
	require.NoError(t, err)
	// Unknown option first: NBD_REP_ERR_UNSUP.
	opt := make([]byte, 16)
	be.PutUint64(opt, optMagic)
	be.PutUint32(opt[8:], 8) // STRUCTURED_REPLY
	_, err = c.Write(opt)
	require.NoError(t, err)
	rep := make([]byte, 20)
	_, err = io.ReadFull(c, rep)
	require.NoError(t, err)
	assert.Equal(t, uint32(repErrUnsup), be.Uint32(rep[12:]))
	// GO with the empty name and no info requests.
	msg := make([]byte, 16+6)
	be.PutUint64(msg, optMagic)
	be.PutUint32(msg[8:], optGo)
	be.PutUint32(msg[12:], 6)
	_, err = c.Write(msg)
	require.NoError(t, err)
	_, err = io.ReadFull(c, rep)
	require.NoError(t, err)
	require.Equal(t, uint32(repInfo), be.Uint32(rep[12:]))
	info := make([]byte, be.Uint32(rep[16:]))
	_, err = io.ReadFull(c, info)
	require.NoError(t, err)
	_, err = io.ReadFull(c, rep)
	require.NoError(t, err)
	require.Equal(t, uint32(repAck), be.Uint32(rep[12:]))
	return be.Uint64(info[2:]), be.Uint16(info[10:])
}

func request(typ uint16, cookie, off uint64, n uint32) []byte {
	h := make([]byte, 28)
	be.PutUint32(h, requestMagic)
	be.PutUint16(h[6:], typ)
	be.PutUint64(h[8:], cookie)
	be.PutUint64(h[16:], off)
	be.PutUint32(h[24:], n)
	return h
}

func TestProtocolErrorsAndCancelWithReadInFlight(t *testing.T) {
	before := runtime.NumGoroutine()
	data := testData(1 << 20)
	sock, _, stop1 := start(t, bytes.NewReader(data), int64(len(data)))
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, uint64(len(data)), negotiate(t, c))

	expect := func(cookie uint64, errno uint32) { expectReply(t, c, cookie, errno) }
	// A write is refused with EPERM after its payload is consumed.
	_, err = c.Write(append(request(cmdWrite, 1, 0, 4), 1, 2, 3, 4))
	require.NoError(t, err)
	expect(1, errPerm)
	// Past the end: EINVAL. Unknown command (FLUSH): EINVAL.
	_, err = c.Write(request(cmdRead, 2, uint64(len(data))-10, 11))
	require.NoError(t, err)
	expect(2, errInval)
	_, err = c.Write(request(3, 3, 0, 0))
	require.NoError(t, err)
	expect(3, errInval)
	// A good read returns the bytes.
	_, err = c.Write(request(cmdRead, 4, 1000, 5000))
	require.NoError(t, err)
	expect(4, 0)
	buf := make([]byte, 5000)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, data[1000:6000], buf)
	// Disconnect: the server closes.
	_, err = c.Write(request(cmdDisc, 5, 0, 0))
	require.NoError(t, err)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	assert.Equal(t, 0, n)
	assert.ErrorIs(t, err, io.EOF)

	// A read blocked in the export at cancel: Serve waits for it, and
	// returns once the export gives up.
	br := newBlockReader()
	sock2, _, stop2 := start(t, br, 1<<20)
	c2, err := net.Dial("unix", sock2)
	require.NoError(t, err)
	defer c2.Close()
	negotiate(t, c2)
	_, err = c2.Write(request(cmdRead, 9, 0, 512))
	require.NoError(t, err)
	<-br.entered // the read is in the export
	go func() { time.Sleep(100 * time.Millisecond); close(br.release) }()
	require.NoError(t, stop2())
	require.NoError(t, stop1())
	c2.Close()
	c.Close()
	noLeak(t, before)
}

// noLeak waits until no more than before goroutines run; it returns as
// soon as they are gone, so its minute is only for a real leak.
func noLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines leaked: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// Reads of a compressed cluster's size, many in flight (qemu-img -m 16 on
// a compressed qcow2), each hold a buffer of about their own size, not
// one of the 2 MiB that runs of plain clusters need; and the buffers of
// one round of reads serve the next.
func TestSmallReadsInFlightHoldSmallBuffers(t *testing.T) {
	data := testData(4 << 20)
	sr := newSlowReader(bytes.NewReader(data))
	sock, s, stop := start(t, sr, int64(len(data)))
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	negotiate(t, c)
	const piece = 40000
	got := make([]byte, piece)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for round := range 4 {
		var reqs []byte
		for i := range DefaultMaxInFlight {
			off := uint64((round*DefaultMaxInFlight + i) * piece)
			reqs = append(reqs, request(cmdRead, off, off, piece)...)
		}
		_, err = c.Write(reqs)
		require.NoError(t, err)
		for range DefaultMaxInFlight {
			var h [16]byte
			_, err = io.ReadFull(c, h[:])
			require.NoError(t, err)
			require.Zero(t, be.Uint32(h[4:]), "errno")
			off := be.Uint64(h[8:]) // the cookie
			_, err = io.ReadFull(c, got)
			require.NoError(t, err)
			require.Equal(t, data[off:off+piece], got)
		}
	}
	runtime.ReadMemStats(&after)
	assert.GreaterOrEqual(t, sr.peak.Load(), int32(DefaultMaxInFlight/2), "reads did not overlap")
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d KiB allocated for %d reads of %d bytes, up to %d at once", allocated>>10, 4*DefaultMaxInFlight, piece, sr.peak.Load())
	// A 2 MiB buffer per read in flight: 32 MiB.
	assert.Less(t, allocated, uint64(DefaultMaxInFlight*(smallBufSize+64<<10)))
	assert.NoError(t, s.Err())
	require.NoError(t, stop())
}
