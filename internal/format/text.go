package format

import (
	"bytes"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/diskimport/engine/errdefs"
)

// textProbeLen is how much of a stream must be text for it to be refused
// as text. A disk's first KiB is its boot sector and partition table (or
// zeros, an ISO's system area): binary. Every raw and ISO image of the
// real-image corpus holds, in its first KiB, a byte below 0x20 other than
// tab, newline, form feed, carriage return and escape, or invalid UTF-8 —
// but one: 100 KiB of 0x55 ('U'), a fill pattern. So text also needs a
// blank (a space or a line break) and more than one distinct byte, unless
// the whole stream is shorter than the probe (a short JSON error body).
const textProbeLen = 1024

// looksLikeText reports whether the first KiB of head (all of it when
// shorter) is UTF-8 text: printable characters, tab, newline, form feed,
// carriage return and escape, with a blank among them (see textProbeLen).
// A character cut by the KiB's end counts as text.
func looksLikeText(head []byte) bool {
	if len(head) == 0 {
		return false
	}
	probe := head[:min(len(head), textProbeLen)]
	if bytes.Count(probe, probe[:1]) == len(probe) {
		return false // one repeated byte: a fill pattern
	}
	if len(head) >= textProbeLen && !bytes.ContainsAny(probe, " \t\n\r\f") {
		return false
	}
	for i := 0; i < len(probe); {
		c := probe[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\f' && c != '\r' && c != 0x1b || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(probe[i:])
		if r == utf8.RuneError && n <= 1 {
			if !utf8.FullRune(probe[i:]) && len(probe) == textProbeLen && len(head) > len(probe) {
				return true // cut at the probe's end
			}
			return false
		}
		i += n
	}
	return true
}

// isTextContentType reports whether an HTTP Content-Type names text.
func isTextContentType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(ct))
	}
	return strings.HasPrefix(mt, "text/") || mt == "application/xhtml+xml"
}

// checkText refuses a raw head that is text, or that the server called
// text and holds no NUL byte in its first KiB. It is called on the innermost stream once no image, compression or
// archive magic matched.
func checkText(head []byte, layers []Compression, o Options) error {
	// A text Content-Type alone is no proof: Go's file server, from
	// freedesktop's MIME table, serves a .vhd as text/x-vhdl (VHDL source).
	// With it, a first KiB without a NUL byte is enough; every disk of the
	// real-image corpus has one there but the 0x55 fill pattern.
	typed := o.ContentType != "" && isTextContentType(o.ContentType) && len(layers) == 0 && !IsTar(head) &&
		bytes.IndexByte(head[:min(len(head), textProbeLen)], 0) < 0
	if !typed && !looksLikeText(head) {
		return nil
	}
	var what string
	switch {
	case o.FromServer && typed:
		what = fmt.Sprintf("the server returned a text page (Content-Type %s), not a disk image", o.ContentType)
	case o.FromServer:
		what = "the server returned a text page, not a disk image"
	default:
		what = "the source is text, not a disk image"
	}
	if len(layers) > 0 {
		what += fmt.Sprintf(" (once %s is removed)", joinCompressions(layers))
	}
	if first := firstLine(head); first != "" {
		what += fmt.Sprintf("; it begins %q", first)
	}
	return &errdefs.NotImageError{Message: what, Kind: errdefs.ErrTextNotImage}
}

// firstLine is the start of head's first non-blank line, at most 60
// characters, for a message.
func firstLine(head []byte) string {
	probe := head[:min(len(head), textProbeLen)]
	for _, line := range bytes.Split(probe, []byte("\n")) {
		s := strings.TrimSpace(strings.ToValidUTF8(string(line), ""))
		if s == "" {
			continue
		}
		if r := []rune(s); len(r) > 60 {
			s = string(r[:60]) + "…"
		}
		return s
	}
	return ""
}

func joinCompressions(layers []Compression) string {
	names := make([]string, len(layers))
	for i, c := range layers {
		names[i] = codecName(c)
	}
	return strings.Join(names, " and ")
}
