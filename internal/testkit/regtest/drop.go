package regtest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// dropRule cuts blob responses: each of the next Times GETs of the blob
// is aborted after After bytes of its body.
type dropRule struct {
	after int64
	times int
}

// DropBlob makes each of the next times GETs of the blob break off (the
// connection is closed mid-body, Content-Length promising more) after
// after bytes of that response's body.
func (r *Registry) DropBlob(d v1.Hash, after int64, times int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drops[d.String()] = &dropRule{after: after, times: times}
}

// BlobRanges lists the Range header of every GET of the blob so far (""
// for a request of the whole blob).
func (r *Registry) BlobRanges(d v1.Hash) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ranges[d.String()]...)
}

// ranging serves blob GETs itself from the full blob the registry returns:
// it honours "Range: bytes=N-" (ggcr's registry only understands
// "bytes=N-M", and containers/image resumes with the open-ended form) and
// applies DropBlob's cuts.
func (r *Registry) ranging(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		i := strings.LastIndex(req.URL.Path, "/blobs/")
		if req.Method != http.MethodGet || i < 0 || strings.Contains(req.URL.Path, "/uploads/") {
			next.ServeHTTP(w, req)
			return
		}
		dig := req.URL.Path[i+len("/blobs/"):]
		rng := req.Header.Get("Range")
		r.mu.Lock()
		r.ranges[dig] = append(r.ranges[dig], rng)
		cut := int64(-1)
		if d := r.drops[dig]; d != nil && d.times > 0 {
			d.times--
			cut = d.after
		}
		r.mu.Unlock()
		if rng == "" && cut < 0 {
			next.ServeHTTP(w, req)
			return
		}
		whole := req.Clone(req.Context())
		whole.Header.Del("Range")
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, whole)
		if rec.Code != http.StatusOK {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		body := rec.Body.Bytes()
		size := int64(len(body))
		start, end := int64(0), size-1
		status := http.StatusOK
		if rng != "" {
			var ok bool
			if start, end, ok = parseRange(rng, size); !ok {
				w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
				http.Error(w, "bad range", http.StatusRequestedRangeNotSatisfiable)
				return
			}
			status = http.StatusPartialContent
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, size))
		}
		part := body[start : end+1]
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", dig)
		w.Header().Set("Content-Length", strconv.FormatInt(int64(len(part)), 10))
		w.WriteHeader(status)
		if cut >= 0 && cut < int64(len(part)) {
			w.Write(part[:cut])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // closes the connection mid-body
		}
		w.Write(part)
	})
}

// parseRange reads "bytes=N-" or "bytes=N-M" against a blob of size bytes.
func parseRange(h string, size int64) (int64, int64, bool) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, _ := strings.Cut(spec, "-")
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 || start >= size {
		return 0, 0, false
	}
	end := size - 1
	if b != "" {
		if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
			return 0, 0, false
		}
		end = min(end, size-1)
	}
	return start, end, true
}
