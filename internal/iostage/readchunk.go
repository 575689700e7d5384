package iostage

import "io"

// ReadChunk fills buf from r, as io.ReadFull does, without its error
// translation: only a bare io.EOF from r ends the stream (eof true, with
// the n bytes read before it). io.ReadFull would turn an EOF after a
// partial read into io.ErrUnexpectedEOF, which is also what a decompressor
// reports for a truncated stream; here that, and any wrapped EOF, is a
// failure of the source and is returned as such. A reader that keeps
// returning nothing fails with io.ErrNoProgress.
func ReadChunk(r io.Reader, buf []byte) (n int, eof bool, err error) {
	for empty := 0; n < len(buf); {
		k, err := r.Read(buf[n:])
		n += k
		if err == io.EOF { //nolint:errorlint // exact on purpose, see above
			return n, true, nil
		}
		if err != nil {
			return n, false, err
		}
		if k > 0 {
			empty = 0
		} else if empty++; empty >= 100 {
			return n, false, io.ErrNoProgress
		}
	}
	return n, false, nil
}
