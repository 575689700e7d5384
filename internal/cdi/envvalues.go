package cdi

import (
	"fmt"
	"strconv"

	"github.com/diskimport/engine/errdefs"
)

// The readers of single variables: an empty variable is the zero value,
// anything unreadable an error naming the variable.

func envBool(getenv func(string) string, name string) (bool, error) {
	v := getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false: %w", name, v, errdefs.ErrInvalidOptions)
	}
	return b, nil
}

func envFloat(getenv func(string) string, name string) (float64, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, v, errdefs.ErrInvalidOptions)
	}
	return f, nil
}

func envInt(getenv func(string) string, name string) (int, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a whole number: %w", name, v, errdefs.ErrInvalidOptions)
	}
	return n, nil
}

func envQuantity(getenv func(string) string, name string) (int64, error) {
	n, err := ParseQuantity(getenv(name))
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", name, err, errdefs.ErrInvalidOptions)
	}
	return n, nil
}

// maxExtraHeaders bounds the IMPORTER_EXTRA_HEADER_<n> numbers looked at.
const maxExtraHeaders = 100

// extraHeaders collects IMPORTER_EXTRA_HEADER_0, _1, … in numeric order
// (gaps allowed).
func extraHeaders(getenv func(string) string) []string {
	var out []string
	for n := range maxExtraHeaders {
		if v := getenv("IMPORTER_EXTRA_HEADER_" + strconv.Itoa(n)); v != "" {
			out = append(out, v)
		}
	}
	return out
}
