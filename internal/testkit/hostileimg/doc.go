// Package hostileimg writes disk images crafted to push a stream decoder
// past its bounds: a few kilobytes once compressed, yet each asks a naive
// decoder for hundreds of megabytes of bookkeeping or spill. Tests make
// them at run time (nothing is stored), stream them into the decoder or a
// compressor, and check the bound holds. Layout facts are the formats'
// own (VMware's Virtual Disk Format 1.1, Microsoft's VHD specification,
// the qcow2 specification).
package hostileimg

import (
	"bufio"
	"io"
)

// pattern writes n bytes of a non-zero byte: nothing the decoder may skip
// as zeros, and a run any compressor shrinks to almost nothing.
func pattern(w io.Writer, n int64, b byte) error {
	buf := make([]byte, min(n, 64<<10))
	for i := range buf {
		buf[i] = b
	}
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// zeros writes n zero bytes.
func zeros(w io.Writer, n int64) error { return pattern(w, n, 0) }

// buffered runs write on a buffered w and flushes it.
func buffered(w io.Writer, write func(w *bufio.Writer) error) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	return bw.Flush()
}
