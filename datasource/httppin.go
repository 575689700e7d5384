package datasource

import (
	"fmt"
	"net/http"
	"strings"
)

// objectPin is what an HTTP object's first response says about which
// version of the object it is. Every later answer for a part of it (a
// resumed stream, a parallel chunk, a random read) is checked against the
// pin, so the bytes of two versions never meet in one import. If-Range
// carries the pin too, but a server may ignore it and answer a range of a
// replaced object with 206 (measured: a Last-Modified server that ignored
// If-Range had an import complete with MiBs of A, then B, then A): only
// this check catches that.
//
// The pin is the strong ETag when the first response has one, else its
// Last-Modified. A weak ETag pins nothing (two versions may share it),
// though two ETags that differ, weak or not, are always two versions.
type objectPin struct {
	etag    string // the first response's strong ETag
	anyTag  string // its ETag's opaque tag, weak or strong, to see a change
	lastMod string // its Last-Modified
}

// pinOf reads the validators of an object's first response.
func pinOf(h http.Header) objectPin {
	et := h.Get("ETag")
	return objectPin{etag: strongETag(et), anyTag: opaqueTag(et), lastMod: h.Get("Last-Modified")}
}

// pinned reports whether later answers can be checked against the pin.
func (p objectPin) pinned() bool { return p.etag != "" || p.lastMod != "" }

// ifRange is the value of If-Range for a range request of the object.
func (p objectPin) ifRange() string {
	if p.etag != "" {
		return p.etag
	}
	return p.lastMod
}

// pinVerdict is what an answer's validators say about the object.
type pinVerdict int

const (
	sameObject   pinVerdict = iota // its validator equals the pin
	otherObject                    // a validator differs: another version
	unverifiable                   // it carries no validator the pin can be checked against
)

// check compares the validators of h, the header of an answer for a part
// of the object, with the pin. why says what differed or was missing.
func (p objectPin) check(h http.Header) (v pinVerdict, why string) {
	et, lm := h.Get("ETag"), h.Get("Last-Modified")
	if tag := opaqueTag(et); tag != "" && p.anyTag != "" && tag != p.anyTag {
		return otherObject, fmt.Sprintf("ETag %s, was %s", et, p.anyTag)
	}
	if p.etag != "" && strongETag(et) == p.etag {
		return sameObject, ""
	}
	if p.lastMod != "" && lm != "" {
		if !sameTime(lm, p.lastMod) {
			return otherObject, fmt.Sprintf("Last-Modified %s, was %s", lm, p.lastMod)
		}
		return sameObject, ""
	}
	switch {
	case p.etag != "":
		return unverifiable, fmt.Sprintf("the answer has no ETag to compare with %s", p.etag)
	case p.lastMod != "":
		return unverifiable, fmt.Sprintf("the answer has no Last-Modified to compare with %s", p.lastMod)
	}
	return unverifiable, "the server gives no strong ETag or Last-Modified to pin the object to"
}

// sameTime compares two HTTP dates as times when both parse (a server may
// spell one instant two ways), else as strings.
func sameTime(a, b string) bool {
	ta, errA := http.ParseTime(a)
	tb, errB := http.ParseTime(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return ta.Equal(tb)
}

// strongETag returns v unless it is weak (W/"..."): If-Range needs a
// strong validator.
func strongETag(v string) string {
	if strings.HasPrefix(v, "W/") {
		return ""
	}
	return v
}

// opaqueTag is an ETag without its weakness flag, for the weak comparison
// of RFC 9110 (two tags that differ here are two versions).
func opaqueTag(v string) string { return strings.TrimPrefix(v, "W/") }

// unaskedEncoding names the Content-Encoding of an answer, which this
// client never asks for (its transport sets DisableCompression, and sends
// no Accept-Encoding), or "" when the body is the object's bytes as they
// are. A range of an encoded body is not that range of the object.
func unaskedEncoding(h http.Header) string {
	ce := strings.TrimSpace(h.Get("Content-Encoding"))
	if ce == "" || strings.EqualFold(ce, "identity") {
		return ""
	}
	return ce
}
