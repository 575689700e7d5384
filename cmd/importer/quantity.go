package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// quantitySuffixes are Kubernetes resource.Quantity suffixes: binary (Ki..Ei)
// and decimal (k..E).
var quantitySuffixes = []struct {
	suffix string
	factor float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
}

// parseQuantity turns a Kubernetes quantity ("10Gi", "1G", "1.5Mi") or a
// plain byte count into bytes, rounding fractions up as Kubernetes does.
func parseQuantity(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num, factor := s, 1.0
	for _, q := range quantitySuffixes {
		if strings.HasSuffix(s, q.suffix) {
			num, factor = strings.TrimSuffix(s, q.suffix), q.factor
			break
		}
	}
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
