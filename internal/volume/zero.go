package volume

import "bytes"

// isZero reports whether b is all zeros. zeros must be at least len(b) long.
// bytes.Equal compiles to the runtime's vectorised memequal, which stops at
// the first difference, so data granules usually cost a few bytes each.
func isZero(b, zeros []byte) bool {
	return bytes.Equal(b, zeros[:len(b)])
}
