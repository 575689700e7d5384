package format

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func grownPipe(t testing.TB) (r, w *os.File, size int) {
	t.Helper()
	r, w, err := blockingPipe()
	require.NoError(t, err)
	t.Cleanup(func() { r.Close(); w.Close() })
	size = growPipe(r, xzPipeSize)
	require.Positive(t, size)
	return r, w, size
}

// TestPacedPipeRoundTrip sends data through a grown pipe with both paced
// ends, the writer in odd sizes and with pauses (a slow child), the reader
// into odd buffers, and compares every byte.
func TestPacedPipeRoundTrip(t *testing.T) {
	r, w, size := grownPipe(t)
	assert.Equal(t, xzPipeSize, size, "1 MiB is the unprivileged maximum; the test expects it")
	want := variedContent(24<<20, 7)
	pw, pr := newPacedPipeWriter(w, size), newPacedPipeReader(r, size)
	go func() {
		rnd := rand.New(rand.NewPCG(1, 2))
		for off := 0; off < len(want); {
			n := min(len(want)-off, 1+rnd.IntN(700<<10))
			_, err := pw.Write(want[off : off+n])
			if err != nil {
				return
			}
			off += n
			if rnd.IntN(8) == 0 {
				time.Sleep(3 * time.Millisecond)
			}
		}
		pw.Close()
	}()
	got := make([]byte, 0, len(want))
	rnd := rand.New(rand.NewPCG(3, 4))
	for {
		buf := make([]byte, 1+rnd.IntN(3<<20))
		n, err := pr.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.Equal(t, len(want), len(got))
	require.True(t, bytes.Equal(want, got), "content differs")
}

// TestPacedPipeWriterReaderGone: once the read end is closed a write fails
// (EPIPE) instead of waiting for room forever.
func TestPacedPipeWriterReaderGone(t *testing.T) {
	r, w, size := grownPipe(t)
	pw := newPacedPipeWriter(w, size)
	_, err := pw.Write(make([]byte, size)) // fills the pipe
	require.NoError(t, err)
	require.NoError(t, r.Close())
	done := make(chan error, 1)
	go func() { _, err := pw.Write(make([]byte, 64<<10)); done <- err }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.True(t, errors.Is(err, syscall.EPIPE), "got %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("write to a pipe without reader did not fail")
	}
}

// TestPacedPipeReaderEOF: the bytes left in the pipe come out, then io.EOF,
// without waiting for more once the writer is gone: the reader's sleeps
// are at most pipeMaxWaits for the tail and one for the end. In a synctest
// bubble (the pipe never blocks here: its bytes and its end are there
// before the first read), those sleeps are the only time that passes, so
// the bound is checked on a clock no load can stretch.
func TestPacedPipeReaderEOF(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w, size := grownPipe(t)
		_, err := w.Write([]byte("tail"))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		pr := newPacedPipeReader(r, size)
		start := time.Now()
		got, err := io.ReadAll(pr)
		require.NoError(t, err)
		assert.Equal(t, "tail", string(got))
		assert.LessOrEqual(t, time.Since(start), (pipeMaxWaits+1)*maxPace)
	})
}

// TestPacedPipeSmallPipeNotPaced: a pipe the kernel would not grow is read
// and written as it comes (pacing a 64 KiB pipe would throttle xz).
func TestPacedPipeSmallPipeNotPaced(t *testing.T) {
	for _, size := range []int{0, 64 << 10, 512 << 10} {
		assert.Zero(t, newPacedPipeReader(nil, size).target, size)
		assert.Zero(t, newPacedPipeWriter(nil, size).half, size)
	}
	assert.Positive(t, newPacedPipeReader(nil, 1<<20).target)
	assert.Positive(t, newPacedPipeWriter(nil, 1<<20).half)
}

// BenchmarkXZStdout reads `xz -dc` of a multi-block file the way the engine
// did before (exec's poller-registered 64 KiB pipe, read as it comes) and
// the way it does now (a 1 MiB blocking pipe, paced), reporting the CPU
// this process spent per run besides the wall time: on two cores that CPU
// is taken from xz's threads.
func BenchmarkXZStdout(b *testing.B) {
	xzBin := needTool(b, "xz")
	raw := filepath.Join(b.TempDir(), "bench.raw")
	writeRaw(b, raw, variedContent(64<<20, 5))
	xzFile := raw + ".xz"
	compressFile(b, raw, xzFile, "xz", "-1", "-T2", "--block-size=4MiB")
	buf := make([]byte, 4<<20)
	drain := func(b *testing.B, r io.Reader) {
		n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{r}, buf)
		require.NoError(b, err)
		require.EqualValues(b, 64<<20, n)
	}
	cpu := func() time.Duration {
		var ru unix.Rusage
		require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	run := func(b *testing.B, one func(cmd *exec.Cmd)) {
		b.SetBytes(64 << 20)
		c0 := cpu()
		for b.Loop() {
			one(exec.Command(xzBin, "-dc", "-T2", xzFile))
		}
		b.ReportMetric(float64(cpu()-c0)/float64(b.N)/1e6, "cpu-ms/op")
	}
	b.Run("exec-pipe", func(b *testing.B) {
		run(b, func(cmd *exec.Cmd) {
			out, err := cmd.StdoutPipe()
			require.NoError(b, err)
			require.NoError(b, cmd.Start())
			drain(b, out)
			require.NoError(b, cmd.Wait())
		})
	})
	b.Run("paced", func(b *testing.B) {
		run(b, func(cmd *exec.Cmd) {
			r, w, err := blockingPipe()
			require.NoError(b, err)
			size := growPipe(r, xzPipeSize)
			cmd.Stdout = w
			require.NoError(b, cmd.Start())
			w.Close()
			drain(b, newPacedPipeReader(r, size))
			require.NoError(b, cmd.Wait())
			r.Close()
		})
	})
}
