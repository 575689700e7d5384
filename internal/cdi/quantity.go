package cdi

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseQuantity turns a Kubernetes quantity ("10Gi", "1G", "1.5Mi") or a
// plain byte count into bytes, rounding fractions up as Kubernetes does.
// IMPORTER_IMAGE_SIZE is a PVC's requested size in this notation; the
// command line's --size takes the same, so a size reads alike everywhere.
func ParseQuantity(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num, factor := splitQuantitySuffix(s)
	if n, err := strconv.ParseInt(num, 10, 64); err == nil && factor == 1 {
		if n < 0 {
			return 0, fmt.Errorf("size %q is negative", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: want bytes or a quantity such as 10Gi or 1G", s)
	}
	v := math.Ceil(f * factor)
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// splitQuantitySuffix splits off a Kubernetes resource.Quantity suffix,
// binary (Ki..Ei) or decimal (k..E), and returns its factor (1 without).
func splitQuantitySuffix(s string) (num string, factor float64) {
	if len(s) >= 2 && s[len(s)-1] == 'i' {
		if i := strings.IndexByte("KMGTPE", s[len(s)-2]); i >= 0 {
			return s[:len(s)-2], math.Exp2(float64(10 * (i + 1)))
		}
	}
	if len(s) >= 1 {
		if i := strings.IndexByte("kMGTPE", s[len(s)-1]); i >= 0 {
			return s[:len(s)-1], math.Pow10(3 * (i + 1))
		}
	}
	return s, 1
}
