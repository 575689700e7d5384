package datasource_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
)

// redirectPair starts the image on one server and, on another port of
// 127.0.0.1 (another origin), a server that requires the extra header and
// redirects to the first. rec holds what the image server received.
func redirectPair(t *testing.T, data []byte, rec *seen) (entry string) {
	t.Helper()
	blob := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		serveBytes(data)(w, r)
	}))
	front := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth-Token") != "s3cr3t" {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, blob.URL+"/blob", http.StatusFound)
	}))
	return front.URL + "/img"
}

func TestHTTPRedirectOtherOriginDropsExtraHeaders(t *testing.T) {
	data := testImage(t, 300<<10)
	var rec seen
	entry := redirectPair(t, data, &rec)
	var logs bytes.Buffer
	src, err := datasource.NewHTTP(entry, datasource.Config{
		Access: datasource.Access{
			Headers: []string{"X-Auth-Token: s3cr3t", "X-Tenant: blue", "Authorization: Bearer tok"},
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)

	// The stream (one GET, redirected).
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))

	// And the range reads, which go straight to the redirected URL.
	require.NotNil(t, st.Ranges, "image server serves ranges")
	rr, err := st.Ranges.Open(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { rr.Close() })
	buf := make([]byte, 64<<10)
	_, err = rr.ReadAt(buf, 4096)
	require.NoError(t, err)
	assert.Equal(t, data[4096:4096+len(buf)], buf)

	hdrs := rec.all()
	require.GreaterOrEqual(t, len(hdrs), 2, "the stream GET and a range GET")
	for i, h := range hdrs {
		for _, name := range []string{"X-Auth-Token", "X-Tenant", "Authorization"} {
			assert.Empty(t, h.Get(name), "request %d to the other origin carries %s", i, name)
		}
		assert.Equal(t, "diskimport-engine", h.Get("User-Agent"), "request %d", i)
	}
	assert.Contains(t, logs.String(), "not sending credentials or extra headers")
	assert.NotContains(t, logs.String(), "s3cr3t", "header values must not be logged")
}

func TestHTTPRedirectSameOriginKeepsExtraHeaders(t *testing.T) {
	data := testImage(t, 100<<10)
	var rec seen
	mux := http.NewServeMux()
	mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/blob", http.StatusFound)
	})
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		serveBytes(data)(w, r)
	})
	srv := newServer(t, mux)
	src, err := datasource.NewHTTP(srv.URL+"/img", datasource.Config{Access: datasource.Access{Headers: []string{"X-Auth-Token: s3cr3t"}}})
	require.NoError(t, err)
	_, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))
	hdrs := rec.all()
	require.Len(t, hdrs, 1)
	assert.Equal(t, "s3cr3t", hdrs[0].Get("X-Auth-Token"))
	assert.False(t, strings.Contains(hdrs[0].Get("X-Auth-Token"), ","), "header sent once")
}
