package nbdserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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
