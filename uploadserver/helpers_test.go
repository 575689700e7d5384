package uploadserver_test

import (
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// serve runs a Handler on 127.0.0.1 for the test.
func serve(t *testing.T, o uploadserver.Options) (*uploadserver.Handler, string) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testimg.Logger(t)
	}
	h := uploadserver.NewHandler(o)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Wait()
	})
	return h, srv.URL
}

// post sends a file as the raw body (or, with form, as the multipart
// field "file", streamed through a pipe).
func post(t *testing.T, url, path, token string, form bool) (int, string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var req *http.Request
	if form {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			_ = mw.WriteField("comment", "an unrelated field first")
			part, err := mw.CreateFormFile(uploadserver.FormField, "image")
			if err == nil {
				_, err = io.Copy(part, f)
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		req, err = http.NewRequest(http.MethodPost, url, pr)
		require.NoError(t, err)
		req.Header.Set("Content-Type", mw.FormDataContentType())
	} else {
		st, err := f.Stat()
		require.NoError(t, err)
		req, err = http.NewRequest(http.MethodPost, url, f)
		require.NoError(t, err)
		req.ContentLength = st.Size()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls the handler until cond holds.
func waitStatus(t *testing.T, h *uploadserver.Handler, cond func(uploadserver.Status) bool) uploadserver.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := h.Status()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never reached the wanted state; last %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
