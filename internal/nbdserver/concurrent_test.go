package nbdserver

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
