package volume

import "math"

const mib = 1 << 20

// UsableSize applies CDI's filesystem-overhead rule: of a volume of size bytes,
// ceil(size/(1+overhead)) is usable, rounded down to a whole MiB so that the
// disk image stays MiB-aligned. Negative or NaN overheads count as 0, and a
// non-positive size gives 0.
func UsableSize(size int64, overhead float64) int64 {
	if size <= 0 {
		return 0
	}
	if !(overhead > 0) { // also catches NaN
		return size / mib * mib
	}
	u := int64(math.Ceil(float64(size) / (1 + overhead)))
	if u > size { // float rounding must never grow the size
		u = size
	}
	return u / mib * mib
}
