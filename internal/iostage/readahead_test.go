package iostage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// pieces returns at most a random small number of bytes per Read, as a
// socket does, then fails with err (io.EOF for a clean end).
type pieces struct {
	data []byte
	rnd  *rand.Rand
	err  error
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, p.err
	}
	n := copy(b[:min(len(b), 1+p.rnd.IntN(70000))], p.data)
	p.data = p.data[n:]
	return n, nil
}

func TestReadAheadContent(t *testing.T) {
	want := testimg.RandomBytes(5<<20+123, 1)
	a := iostage.NewReadAhead(&pieces{data: want, rnd: rand.New(rand.NewPCG(2, 3)), err: io.EOF}, 256<<10, 4)
	defer a.Close()
	var got bytes.Buffer
	rnd := rand.New(rand.NewPCG(4, 5))
	for {
		buf := make([]byte, 1+rnd.IntN(600<<10))
		n, err := a.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.True(t, bytes.Equal(want, got.Bytes()), "content differs (%d of %d bytes)", got.Len(), len(want))
	n, err := a.Read(make([]byte, 10))
	assert.Zero(t, n)
	assert.Equal(t, io.EOF, err, "EOF is sticky")
}

// TestReadAheadErrorAfterData: every byte the source gave before failing
// comes out, then its very error (not wrapped, not turned into EOF).
func TestReadAheadErrorAfterData(t *testing.T) {
	boom := errors.New("connection reset")
	want := testimg.RandomBytes(1<<20+7, 6)
	a := iostage.NewReadAhead(&pieces{data: want, rnd: rand.New(rand.NewPCG(7, 8)), err: boom}, 64<<10, 3)
	defer a.Close()
	got, err := io.ReadAll(a)
	assert.Same(t, boom, err)
	assert.True(t, bytes.Equal(want, got), "got %d of %d bytes", len(got), len(want))
}

// TestReadAheadSourceFreeAfterEOF: once the source's EOF came out, the
// source may be read directly (the engine drains it after the decoder):
// the race detector checks nothing else touches it then.
func TestReadAheadSourceFreeAfterEOF(t *testing.T) {
	src := &pieces{data: testimg.RandomBytes(300<<10, 9), rnd: rand.New(rand.NewPCG(1, 1)), err: io.EOF}
	a := iostage.NewReadAhead(src, 64<<10, 2)
	_, err := io.Copy(io.Discard, a)
	require.NoError(t, err)
	n, err := src.Read(make([]byte, 10))
	assert.Zero(t, n)
	assert.Equal(t, io.EOF, err)
	require.NoError(t, a.Close())
}

// blocking never returns until released.
type blocking struct{ release chan struct{} }

func (b *blocking) Read(p []byte) (int, error) {
	<-b.release
	return 0, io.EOF
}

// TestReadAheadCloseDoesNotWait: Close returns at once even while the
// source's read hangs; the goroutine ends once that read returns. In a
// synctest bubble: a Close that waited would leave every goroutine blocked
// (the bubble fails it as a deadlock), and synctest.Wait returns once the
// reading goroutine has ended or blocked, so its count is exact.
func TestReadAheadCloseDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := runtime.NumGoroutine()
		src := &blocking{release: make(chan struct{})}
		a := iostage.NewReadAhead(src, 4096, 2)
		synctest.Wait() // the goroutine is in the source's read
		require.NoError(t, a.Close())
		close(src.release)
		synctest.Wait()
		assert.Equal(t, before, runtime.NumGoroutine(), "the reading goroutine did not end")
	})
}

// endless waits for release, then returns 'a's forever.
type endless struct {
	entered, release chan struct{}
	once             sync.Once
}

func (e *endless) Read(p []byte) (int, error) {
	e.once.Do(func() { close(e.entered) })
	<-e.release
	n := min(len(p), 1000)
	copy(p, bytes.Repeat([]byte("a"), n))
	return n, nil
}

// TestReadAheadCloseWakesReader: a Read waiting while Close is called gets
// the chunk being read ahead, then errdefs.ErrClosed, instead of hanging
// or reading the source on.
//
// In a synctest bubble: synctest.Wait sees the consumer waiting, and the
// bound below is the bubble's time, reached only if Read hangs.
func TestReadAheadCloseWakesReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { closeWakesReader(t) })
}

func closeWakesReader(t *testing.T) {
	src := &endless{entered: make(chan struct{}), release: make(chan struct{})}
	a := iostage.NewReadAhead(src, 4096, 2)
	got := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		b, err := io.ReadAll(a)
		got <- b
		errc <- err
	}()
	<-src.entered   // the goroutine is reading the source
	synctest.Wait() // and the consumer waits for its chunk
	require.NoError(t, a.Close())
	close(src.release)
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, errdefs.ErrClosed)
		assert.Equal(t, bytes.Repeat([]byte("a"), 4096), <-got)
	case <-time.After(5 * time.Second):
		t.Fatal("Read hung after Close")
	}
}

// Next hands out whole buffers, aligned as asked, in order and without a
// copy, then the source's error: every byte once, in order, and the
// error after the last.
func TestReadAheadNextHandsOutWholeAlignedBuffers(t *testing.T) {
	want := testimg.RandomBytes(3<<20+4567, 4)
	for _, end := range []error{io.EOF, errors.New("the disk failed")} {
		a := iostage.NewAlignedReadAhead(&pieces{data: want, rnd: rand.New(rand.NewPCG(5, 6)), err: end}, 1<<20, 3, 4096)
		var got []byte
		var err error
		for {
			var b []byte
			if b, err = a.Next(); err != nil {
				break
			}
			assert.Zero(t, uintptr(unsafe.Pointer(&b[0]))%4096, "a buffer off the alignment")
			if len(got)+len(b) < len(want) {
				assert.Len(t, b, 1<<20, "a buffer handed out before the end is whole")
			}
			got = append(got, b...)
		}
		assert.ErrorIs(t, err, end)
		require.True(t, bytes.Equal(want, got), "%d bytes of %d", len(got), len(want))
		a.Close()
	}
}

// TestReadAheadNextContextReturnsAtCancel: NextContext waiting on a source
// that blocks returns the context's error the moment it ends (in a synctest
// bubble: exactly then), and the ReadAhead, closed, lets its goroutine end
// once the source's read returns (the bubble fails a goroutine left).
func TestReadAheadNextContextReturnsAtCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &blocking{release: make(chan struct{})}
		a := iostage.NewReadAhead(src, 4096, 2)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		start := time.Now()
		b, err := a.NextContext(ctx)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		require.NoError(t, a.Close())
		close(src.release)
		a.Wait()
	})
}

// TestReadAheadLastChunkKeepsItsBytes: once Next returned the source's end,
// the goroutine has ended and the last chunk it handed out still holds its
// bytes (the volume writer keeps a short last chunk as its stage).
func TestReadAheadLastChunkKeepsItsBytes(t *testing.T) {
	want := testimg.RandomBytes(2*64<<10+999, 3)
	a := iostage.NewReadAhead(bytes.NewReader(want), 64<<10, 2)
	var last []byte
	var got []byte
	for {
		b, err := a.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got = append(got, b...)
		last = b
	}
	a.Wait()
	assert.Equal(t, want, got)
	assert.Equal(t, want[2*64<<10:], last, "the last chunk was overwritten")
}
