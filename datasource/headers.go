package datasource

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// ParseHeaders turns "Name: value" lines (CDI's IMPORTER_EXTRA_HEADER_n
// format) into a header set. Errors name the line number, never the value,
// because extra headers often carry tokens.
func ParseHeaders(lines []string) (http.Header, error) {
	h := http.Header{}
	for i, line := range lines {
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		value = strings.TrimSpace(value)
		if !ok || !isToken(name) {
			return nil, fmt.Errorf("extra header %d is malformed, want \"Name: value\": %w", i, errdefs.ErrInvalidOptions)
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			return nil, fmt.Errorf("extra header %d (%s) has a line break or NUL in its value: %w", i, name, errdefs.ErrInvalidOptions)
		}
		h.Add(name, value)
	}
	return h, nil
}

// isToken reports whether s is an RFC 9110 field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
