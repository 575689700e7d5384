package datasource

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

const (
	mod1 = "Tue, 14 Nov 2023 22:13:20 GMT"
	mod2 = "Tue, 14 Nov 2023 23:13:20 GMT"
)

// TestObjectPinTellsVersionsApart: every answer is checked against the
// first answer's validators: the strong ETag, else Last-Modified; a weak
// ETag pins nothing but two ETags that differ are two versions; an answer
// that carries nothing to compare is unverifiable, never the same object.
func TestObjectPinTellsVersionsApart(t *testing.T) {
	for _, c := range []struct {
		name   string
		first  http.Header
		answer http.Header
		want   pinVerdict
	}{
		{"same strong ETag", header("ETag", `"a"`), header("ETag", `"a"`), sameObject},
		{"other strong ETag", header("ETag", `"a"`), header("ETag", `"b"`), otherObject},
		{"strong ETag, answer without validators", header("ETag", `"a"`), header(), unverifiable},
		{"strong ETag, answer with Last-Modified only", header("ETag", `"a"`, "Last-Modified", mod1), header("Last-Modified", mod1), sameObject},
		{"strong ETag, answer with another Last-Modified only", header("ETag", `"a"`, "Last-Modified", mod1), header("Last-Modified", mod2), otherObject},
		{"same Last-Modified", header("Last-Modified", mod1), header("Last-Modified", mod1), sameObject},
		{"same instant spelt in RFC 850", header("Last-Modified", mod1), header("Last-Modified", "Tuesday, 14-Nov-23 22:13:20 GMT"), sameObject},
		{"other Last-Modified", header("Last-Modified", mod1), header("Last-Modified", mod2), otherObject},
		{"Last-Modified, answer without it", header("Last-Modified", mod1), header("ETag", `"x"`), unverifiable},
		{"weak ETags differ, Last-Modified equal", header("ETag", `W/"a"`, "Last-Modified", mod1), header("ETag", `W/"b"`, "Last-Modified", mod1), otherObject},
		{"weak then strong of another tag", header("ETag", `W/"a"`, "Last-Modified", mod1), header("ETag", `"b"`, "Last-Modified", mod1), otherObject},
		{"same weak ETag and Last-Modified", header("ETag", `W/"a"`, "Last-Modified", mod1), header("ETag", `W/"a"`, "Last-Modified", mod1), sameObject},
		{"a weak ETag alone pins nothing", header("ETag", `W/"a"`), header("ETag", `W/"a"`), unverifiable},
		{"no validators", header(), header(), unverifiable},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why := pinOf(c.first).check(c.answer)
			assert.Equal(t, c.want, got, why)
			if got != sameObject {
				assert.NotEmpty(t, why)
			}
		})
	}
	assert.False(t, pinOf(header("ETag", `W/"a"`)).pinned())
	assert.True(t, pinOf(header("Last-Modified", mod1)).pinned())
	assert.Equal(t, `"a"`, pinOf(header("ETag", `"a"`, "Last-Modified", mod1)).ifRange())
	assert.Equal(t, mod1, pinOf(header("ETag", `W/"a"`, "Last-Modified", mod1)).ifRange())
}

// FuzzRangeAnswer feeds the range reader's check of a 206 any headers: it
// never panics, and whatever it accepts is exactly the range asked for, of
// an object of the size first seen, unencoded, with validators equal to the
// first answer's.
func FuzzRangeAnswer(f *testing.F) {
	f.Add(`"a"`, "", `"a"`, "", "bytes 10-19/100", "10", "", int64(10), 10)
	f.Add("", mod1, "", mod1, "bytes 0-0/1", "1", "identity", int64(0), 1)
	f.Add(`W/"a"`, mod1, `W/"b"`, mod1, "bytes 5-9/*", "-1", "gzip", int64(5), 5)
	f.Fuzz(func(t *testing.T, etag, lastMod, answerTag, answerMod, contentRange, contentLength, encoding string, off int64, n int) {
		if n <= 0 || n > 1<<20 || off < 0 {
			return
		}
		first := header("ETag", etag, "Last-Modified", lastMod)
		pin := pinOf(first)
		if !pin.pinned() {
			return // no range reader is made for such an object
		}
		const size = 1 << 30
		r := &RangeReader{src: &httpSource{redacted: "http://x/"}, size: size, pin: pin}
		h := header("ETag", answerTag, "Last-Modified", answerMod, "Content-Range", contentRange, "Content-Encoding", encoding)
		cl, err := strconv.ParseInt(contentLength, 10, 64)
		if err != nil {
			cl = -1
		}
		err = r.checkPartial(&http.Response{StatusCode: http.StatusPartialContent, Header: h, ContentLength: cl}, n, off)
		if err != nil {
			return
		}
		start, total, ok := parseContentRange(contentRange)
		if !ok || start != off || total != size || (cl >= 0 && cl != int64(n)) {
			t.Fatalf("accepted Content-Range %q / length %d for bytes %d+%d", contentRange, cl, off, n)
		}
		if e := strings.TrimSpace(encoding); e != "" && !strings.EqualFold(e, "identity") {
			t.Fatalf("accepted Content-Encoding %q", encoding)
		}
		if v, _ := pin.check(h); v != sameObject {
			t.Fatalf("accepted an answer (ETag %q, Last-Modified %q) not shown to be the object (ETag %q, Last-Modified %q)", answerTag, answerMod, etag, lastMod)
		}
		if pin.etag == "" && !sameTime(answerMod, lastMod) {
			t.Fatalf("accepted Last-Modified %q for %q", answerMod, lastMod)
		}
	})
}
