package nbdserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memExport is a WritableExport in memory that records what it was asked.
type memExport struct {
	mu        sync.Mutex
	data      []byte
	noFast    bool  // fast zeroes fail with ENOTSUP
	failWrite error // returned by every WriteAt when set
	writes    int
	zeroes    []zeroCall
	syncs     int
}

type zeroCall struct {
	off, n              int64
	mayDeallocate, fast bool
}

func (m *memExport) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(p, m.data[off:]), nil
}

func (m *memExport) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWrite != nil {
		return 0, m.failWrite
	}
	m.writes++
	return copy(m.data[off:], p), nil
}

func (m *memExport) ZeroAt(off, n int64, mayDeallocate, fast bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fast && m.noFast {
		return fmt.Errorf("no fast zero here: %w", syscall.ENOTSUP)
	}
	m.zeroes = append(m.zeroes, zeroCall{off, n, mayDeallocate, fast})
	clear(m.data[off : off+n])
	return nil
}

func (m *memExport) Sync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncs++
	return nil
}

// startWritable serves exp with 512-byte blocks until the test ends.
func startWritable(t *testing.T, exp *memExport) (string, *Server) {
	t.Helper()
	return serveWritable(t, exp, int64(len(exp.data)), 512)
}

func rawSpec(sock string) string {
	b, _ := json.Marshal(map[string]any{"driver": "raw", "file": nbdFile(sock)})
	return "json:" + string(b)
}

// qemu-img convert -n writes a qcow2's content into the export: data as
// writes, zero runs as WRITE_ZEROES (never as zero buffers), a flush at the
// end, the same bytes as the raw image.
func TestQemuImgWritesExport(t *testing.T) {
	needQemu(t)
	data := testData(6 << 20)
	qc := qcow2Of(t, data)

	for _, noFast := range []bool{false, true} {
		t.Run(fmt.Sprintf("noFast=%v", noFast), func(t *testing.T) {
			exp := &memExport{data: bytes.Repeat([]byte{0xA5}, len(data)), noFast: noFast}
			sock, s := startWritable(t, exp)
			for _, cache := range []string{"none", "writeback"} {
				out, err := qemuImg(t, "convert", "-n", "-W", "-m", "16", "-t", cache, "-f", "qcow2", "-O", "raw", qc, rawSpec(sock))
				require.NoError(t, err, "%s", out)
				exp.mu.Lock()
				assert.True(t, bytes.Equal(data, exp.data), "export content differs (cache %s)", cache)
				assert.NotEmpty(t, exp.zeroes, "zero runs were not sent as WRITE_ZEROES")
				assert.Positive(t, exp.syncs, "no flush")
				exp.mu.Unlock()
			}
			assert.NoError(t, s.Err())
		})
	}
}

// The write-side commands by hand: results, errnos, and which export
// method each one reaches.
func TestWriteProtocol(t *testing.T) {
	_, err := NewWritable(&memExport{data: make([]byte, 1000)}, 1000, nil)
	require.Error(t, err, "a size that is not a multiple of 512")

	exp := &memExport{data: make([]byte, 1<<20), noFast: true}
	sock, s := startWritable(t, exp)
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	size, flags := negotiateFlags(t, c)
	require.EqualValues(t, 1<<20, size)
	assert.Zero(t, flags&transReadOnly)
	for _, f := range []uint16{transSendFlush, transSendTrim, transSendWriteZeroes, transSendFastZero} {
		assert.NotZero(t, flags&f, "flag %#x not advertised", f)
	}
	expect := func(cookie uint64, errno uint32) { expectReply(t, c, cookie, errno) }
	send := func(typ, flags uint16, cookie, off uint64, n uint32, payload []byte) {
		t.Helper()
		h := request(typ, cookie, off, n)
		be.PutUint16(h[4:], flags)
		_, err := c.Write(append(h, payload...))
		require.NoError(t, err)
	}
	payload := bytes.Repeat([]byte("abcdefgh"), 512)
	send(cmdWrite, 0, 1, 8192, uint32(len(payload)), payload)
	expect(1, 0)
	// Read back what was written.
	send(cmdRead, 0, 2, 8192, uint32(len(payload)), nil)
	expect(2, 0)
	got := make([]byte, len(payload))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	assert.Equal(t, payload, got)
	// FUA: written, then synced.
	send(cmdWrite, cmdFlagFUA, 3, 0, 512, payload[:512])
	expect(3, 0)
	// Past the end: ENOSPC, and the payload is consumed (the next reply
	// still lines up).
	send(cmdWrite, 0, 4, 1<<20-512, 1024, payload[:1024])
	expect(4, errNoSpc)
	// Zeroes: NO_HOLE forbids deallocating; a fast zero the export cannot
	// do is ENOTSUP and not an export failure; TRIM zeroes and may
	// deallocate.
	send(cmdWriteZeroes, cmdFlagNoHole, 5, 8192, 2048, nil)
	expect(5, 0)
	send(cmdWriteZeroes, cmdFlagFastZero, 6, 0, 4096, nil)
	expect(6, errNotSup)
	send(cmdTrim, 0, 7, 12288, 512, nil)
	expect(7, 0)
	send(cmdFlush, 0, 8, 0, 0, nil)
	expect(8, 0)
	send(cmdWriteZeroes, 0, 9, 1<<20, 512, nil)
	expect(9, errNoSpc)

	exp.mu.Lock()
	assert.Equal(t, 2, exp.writes)
	assert.Equal(t, []zeroCall{{8192, 2048, false, false}, {12288, 512, true, false}}, exp.zeroes)
	assert.Equal(t, 2, exp.syncs, "FUA and FLUSH")
	assert.Equal(t, make([]byte, 2048), exp.data[8192:10240])
	assert.Equal(t, payload[2048:], exp.data[10240:12288], "the data past the zeroes survived")
	assert.Equal(t, payload[:512], exp.data[:512])
	exp.failWrite = fmt.Errorf("device gone: %w", syscall.EIO)
	exp.mu.Unlock()
	assert.NoError(t, s.Err(), "an expected ENOTSUP counted as a failure")

	// An export failure: EIO to the client, remembered for Err.
	send(cmdWrite, 0, 10, 0, 512, payload[:512])
	expect(10, errIO)
	require.Error(t, s.Err())
	assert.ErrorIs(t, s.Err(), syscall.EIO)
	exp.mu.Lock()
	exp.failWrite = fmt.Errorf("full: %w", syscall.ENOSPC)
	exp.mu.Unlock()
	send(cmdWrite, 0, 11, 0, 512, payload[:512])
	expect(11, errNoSpc)

	send(cmdDisc, 0, 12, 0, 0, nil)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 16))
	assert.True(t, errors.Is(err, io.EOF), "server did not close after DISC: %v", err)
}

// slowExport is a memExport whose writes take a while, so that requests
// overlap; it counts the peak of writes in progress and, at each Sync,
// records which writes had completed.
type slowExport struct {
	memExport
	cur, peak atomic.Int32
	doneMu    sync.Mutex
	done      map[int64]bool   // offsets of completed writes
	atSync    []map[int64]bool // done, as each Sync saw it
}

func (s *slowExport) WriteAt(p []byte, off int64) (int, error) {
	n := s.cur.Add(1)
	for pk := s.peak.Load(); n > pk && !s.peak.CompareAndSwap(pk, n); pk = s.peak.Load() {
	}
	defer s.cur.Add(-1)
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
	k, err := s.memExport.WriteAt(p, off)
	s.doneMu.Lock()
	s.done[off] = true
	s.doneMu.Unlock()
	return k, err
}

func (s *slowExport) Sync() error {
	s.doneMu.Lock()
	snap := make(map[int64]bool, len(s.done))
	for k := range s.done {
		snap[k] = true
	}
	s.atSync = append(s.atSync, snap)
	s.doneMu.Unlock()
	return s.memExport.Sync()
}

// serveWritable serves exp on a unix socket until the test ends,
// advertising minBlock (0: the server's default).
func serveWritable(t *testing.T, exp WritableExport, size int64, minBlock uint32) (string, *Server) {
	t.Helper()
	s, err := NewWritable(exp, size, nil)
	require.NoError(t, err)
	s.MinBlock = minBlock
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after cancel")
		}
	})
	return sock, s
}

// nbdClient pipelines requests on one connection and matches the replies
// by cookie, as qemu's client does.
type nbdClient struct {
	t       *testing.T
	c       net.Conn
	wmu     sync.Mutex
	pending sync.Map // cookie -> chan reply
	reads   sync.Map // cookie -> []byte to fill
	next    atomic.Uint64
}

type reply struct {
	errno uint32
	data  []byte
}

func dialClient(t *testing.T, sock string) *nbdClient {
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	negotiateFlags(t, c)
	cl := &nbdClient{t: t, c: c}
	go cl.receive()
	return cl
}

func (cl *nbdClient) receive() {
	h := make([]byte, 16)
	for {
		if _, err := io.ReadFull(cl.c, h); err != nil {
			return
		}
		cookie := be.Uint64(h[8:])
		r := reply{errno: be.Uint32(h[4:])}
		if buf, ok := cl.reads.LoadAndDelete(cookie); ok && r.errno == 0 {
			r.data = buf.([]byte)
			if _, err := io.ReadFull(cl.c, r.data); err != nil {
				return
			}
		}
		ch, ok := cl.pending.LoadAndDelete(cookie)
		if !ok {
			cl.t.Errorf("reply for unknown cookie %d", cookie)
			return
		}
		ch.(chan reply) <- r
	}
}

// send queues one request and returns where its reply will arrive.
func (cl *nbdClient) send(typ uint16, off uint64, n uint32, payload []byte) <-chan reply {
	cookie := cl.next.Add(1)
	ch := make(chan reply, 1)
	cl.pending.Store(cookie, ch)
	if typ == cmdRead {
		cl.reads.Store(cookie, make([]byte, n))
	}
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	_, err := cl.c.Write(append(request(typ, cookie, off, n), payload...))
	require.NoError(cl.t, err)
	return ch
}

func wait(t *testing.T, ch <-chan reply) reply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no reply")
		return reply{}
	}
}

// Many writes in flight at once on one connection, then reads of every
// block while a flush and more writes are in flight: the export runs them
// in parallel, every byte lands where it was sent, and the flush covers
// every write the client had seen completed before sending it.
func TestWritableExportConcurrentWritesAndFlush(t *testing.T) {
	const block, blocks = 64 << 10, 128
	exp := &slowExport{memExport: memExport{data: make([]byte, block*blocks)}, done: map[int64]bool{}}
	want := testData(block * blocks)
	sock, s := serveWritable(t, exp, int64(len(exp.data)), 0)

	cl := dialClient(t, sock)
	// First half: all sent before any reply is awaited.
	var first []<-chan reply
	for i := 0; i < blocks/2; i++ {
		off := i * block
		first = append(first, cl.send(cmdWrite, uint64(off), block, want[off:off+block]))
	}
	for _, ch := range first {
		assert.Zero(t, wait(t, ch).errno)
	}
	// The flush, with the second half sent right behind it.
	flush := cl.send(cmdFlush, 0, 0, nil)
	var second []<-chan reply
	for i := blocks / 2; i < blocks; i++ {
		off := i * block
		second = append(second, cl.send(cmdWrite, uint64(off), block, want[off:off+block]))
	}
	assert.Zero(t, wait(t, flush).errno)
	for _, ch := range second {
		assert.Zero(t, wait(t, ch).errno)
	}
	// Reads of every block, all in flight at once, in a shuffled order.
	order := rand.Perm(blocks)
	reads := make([]<-chan reply, blocks)
	for _, i := range order {
		reads[i] = cl.send(cmdRead, uint64(i*block), block, nil)
	}
	for i, ch := range reads {
		r := wait(t, ch)
		require.Zero(t, r.errno)
		assert.True(t, bytes.Equal(want[i*block:(i+1)*block], r.data), "block %d read back wrong", i)
	}
	exp.mu.Lock()
	assert.True(t, bytes.Equal(want, exp.data), "export content differs")
	exp.mu.Unlock()
	assert.Greater(t, exp.peak.Load(), int32(1), "writes never ran in parallel")
	assert.LessOrEqual(t, exp.peak.Load(), int32(DefaultMaxInFlight))

	exp.doneMu.Lock()
	defer exp.doneMu.Unlock()
	require.Len(t, exp.atSync, 1)
	for i := 0; i < blocks/2; i++ {
		assert.True(t, exp.atSync[0][int64(i*block)], "the flush ran before completed write %d", i)
	}
	assert.NoError(t, s.Err())
}
