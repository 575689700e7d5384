package netconn

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingConn counts the writes that reach the connection beneath.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// tcpPair is a connected pair over 127.0.0.1.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// TestCoalescedWritesArriveWholeAndInOrder: full records, short writes
// between them and more than BufferSize of records in a row reach the
// peer byte for byte in their order, in far fewer writes than were made.
func TestCoalescedWritesArriveWholeAndInOrder(t *testing.T) {
	client, server := tcpPair(t)
	under := &countingConn{Conn: client}
	c := Coalesce(under)
	var sent bytes.Buffer
	write := func(n int) {
		p := random(t, n)
		k, err := c.Write(p)
		require.NoError(t, err)
		require.Equal(t, n, k)
		sent.Write(p)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(server)
		got <- b
	}()
	writes := 0
	for range 3 {
		write(200) // a request's head
		writes++
		for range 40 { // 40 records of a TLS stream: more than BufferSize
			write(fullRecord + 29)
			writes++
		}
	}
	write(5) // the stream's end
	writes++
	require.NoError(t, c.Close())
	assert.Equal(t, sent.Bytes(), <-got)
	assert.Less(t, under.writes.Load(), int64(writes/4), "%d writes gathered into %d", writes, under.writes.Load())
}

// TestALastFullRecordLeavesWithinTheWait: a full record with nothing
// after it (its writer now waits for an answer) reaches the peer once
// gatherWait has passed, not before.
func TestALastFullRecordLeavesWithinTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		c := Coalesce(a)
		defer c.Close()
		p := bytes.Repeat([]byte{7}, fullRecord)
		start := time.Now()
		_, err := c.Write(p)
		require.NoError(t, err)
		got := make([]byte, len(p))
		_, err = io.ReadFull(b, got)
		require.NoError(t, err)
		assert.Equal(t, p, got)
		assert.Equal(t, gatherWait, time.Since(start), "it left once the wait passed")
	})
}

// TestAFailedWriteFailsTheNextOnes: once a write to the connection beneath
// failed, gathered or not, every later write fails with its error.
func TestAFailedWriteFailsTheNextOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		c := Coalesce(a)
		b.Close()
		_, err := c.Write(bytes.Repeat([]byte{1}, fullRecord)) // gathered
		require.NoError(t, err)
		time.Sleep(gatherWait) // its write fails
		synctest.Wait()
		_, err = c.Write([]byte("short"))
		require.ErrorIs(t, err, io.ErrClosedPipe)
		_, err = c.Write(bytes.Repeat([]byte{1}, fullRecord))
		require.ErrorIs(t, err, io.ErrClosedPipe)
		c.Close()
	})
}

// TestBufferedReadsDeliverTheStream: a connection accepted through
// BufferedReads reads what its peer wrote, in small writes and large, and
// then its end.
func TestBufferedReadsDeliverTheStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	bl := BufferedReads(ln)
	defer bl.Close()
	want := random(t, 3*BufferSize+12345)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1000+len(rest)%70000)
			if _, err := c.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
	}()
	c, err := bl.Accept()
	require.NoError(t, err)
	defer c.Close()
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the stream read back")
}

// readSizes records the longest read asked of the connection beneath.
type readSizes struct {
	net.Conn
	longest atomic.Int64
}

func (c *readSizes) Read(p []byte) (int, error) {
	if n := int64(len(p)); n > c.longest.Load() {
		c.longest.Store(n)
	}
	return c.Conn.Read(p)
}

// TestBufferedDialerDeliversHTTPSAndPlainBodies: a transport dialling
// through BufferedDialer reads an HTTPS answer and a plain one whole, and
// a plain body read in pieces longer than the buffer is read straight
// into them (the buffer beneath never asks for less).
func TestBufferedDialerDeliversHTTPSAndPlainBodies(t *testing.T) {
	want := random(t, 5*BufferSize+777)
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(want) })
	const size = 64 << 10
	var seen []*readSizes
	var mu sync.Mutex
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		rs := &readSizes{Conn: c}
		mu.Lock()
		seen = append(seen, rs)
		mu.Unlock()
		return rs, nil
	}
	for _, tls := range []bool{true, false} {
		srv := httptest.NewUnstartedServer(handler)
		if tls {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.DialContext = BufferedDialer(dial, size)
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		require.NoError(t, err)
		var got []byte
		buf := make([]byte, 4*size)
		for {
			n, err := io.ReadFull(resp.Body, buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		tr.CloseIdleConnections()
		srv.Close()
		assert.True(t, bytes.Equal(want, got), "the body read back (TLS %v)", tls)
	}
	require.Len(t, seen, 2)
	assert.Greater(t, seen[1].longest.Load(), int64(size), "a plain body's long reads go past the buffer")
}
