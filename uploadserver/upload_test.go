package uploadserver_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testtar"
	"github.com/diskimport/engine/uploadserver"
)

const diskSize = 4 << 20

type images struct {
	raw, gz, qcow2 string
	data           []byte // raw's bytes
	digest         string
}

func makeImages(t *testing.T) images {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", diskSize, 11)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	im := images{raw: raw, data: data, digest: testimg.Digest(t, raw, -1)}
	testimg.Need(t, "gzip")
	im.gz = testimg.Compress(t, raw, "gz")
	if testimg.Need(t, "qemu-img"); true {
		im.qcow2 = testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	}
	return im
}

func fileTarget(t *testing.T) importer.Options {
	return importer.Options{Target: filepath.Join(t.TempDir(), "disk.img"), TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}}
}

func TestUploadFormatsAndModes(t *testing.T) {
	im := makeImages(t)
	modes := []struct {
		name  string
		path  string
		form  bool
		async bool
	}{
		{"sync", uploadserver.PathUpload, false, false},
		{"async", uploadserver.PathUploadAsync, false, true},
		{"form", uploadserver.PathUploadForm, true, false},
		{"form-async", uploadserver.PathUploadFormAsync, true, true},
	}
	for _, img := range []struct{ name, path string }{{"raw", im.raw}, {"raw.gz", im.gz}, {"qcow2", im.qcow2}} {
		for _, m := range modes {
			t.Run(img.name+"/"+m.name, func(t *testing.T) {
				o := fileTarget(t)
				h, base := serve(t, uploadserver.Options{Import: o})
				code, body := post(t, base+m.path, img.path, "", m.form)
				require.Equal(t, http.StatusOK, code, body)
				if m.async {
					waitStatus(t, h, func(s uploadserver.Status) bool { return !s.Busy })
				}
				st := getStatus(t, base, "")
				require.Equal(t, "Complete", st.Phase, "status %+v", st)
				assert.True(t, st.Complete)
				fi, err := os.Stat(img.path)
				require.NoError(t, err)
				assert.Equal(t, fi.Size(), st.Bytes)
				assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
				res, err, ok := h.Last()
				require.True(t, ok, "last error %v", err)
				assert.True(t, res.Complete)
				// Not KeepRunning: a second upload is refused.
				code, _ = post(t, base+uploadserver.PathUpload, im.raw, "", false)
				assert.Equal(t, http.StatusServiceUnavailable, code)
			})
		}
	}
}

func getStatus(t *testing.T, base, token string) uploadserver.Status {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+uploadserver.PathStatus, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s uploadserver.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

func TestUploadToken(t *testing.T) {
	im := makeImages(t)
	o := fileTarget(t)
	_, base := serve(t, uploadserver.Options{Import: o, Token: "s3cret"})
	resp, err := http.Get(base + uploadserver.PathHealthz)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "healthz needs no token")
	resp, err = http.Get(base + uploadserver.PathStatus)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	code, _ := post(t, base+uploadserver.PathUpload, im.raw, "", false)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(t, base+uploadserver.PathUpload, im.raw, "wrong", false)
	assert.Equal(t, http.StatusUnauthorized, code)
	_, err = os.Stat(o.Target)
	assert.True(t, os.IsNotExist(err), "nothing written without the token")

	code, body := post(t, base+uploadserver.PathUpload, im.raw, "s3cret", false)
	require.Equal(t, http.StatusOK, code, body)
	var msg uploadserver.Answer
	require.NoError(t, json.Unmarshal([]byte(body), &msg))
	assert.Equal(t, uploadserver.MessageUploadComplete, msg.Message)
	assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
	assert.Equal(t, "Complete", getStatus(t, base, "s3cret").Phase)
}

// TestUploadBusyThenDisconnectThenRetry: a second upload while one runs is
// refused with 409; a client vanishing mid-upload fails that import
// without a complete target; the next try succeeds.
func TestUploadBusyDisconnectRetry(t *testing.T) {
	im := makeImages(t)
	o := fileTarget(t)
	h, base := serve(t, uploadserver.Options{Import: o})
	data := im.data

	// A raw TCP client that sends half the body and then disappears.
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", uploadserver.PathUpload, u.Host, len(data))
	require.NoError(t, err)
	_, err = conn.Write(data[:len(data)/2])
	require.NoError(t, err)
	waitStatus(t, h, func(s uploadserver.Status) bool { return s.Busy && s.Bytes > 0 })

	code, body := post(t, base+uploadserver.PathUpload, im.raw, "", false)
	assert.Equal(t, http.StatusConflict, code, body)
	code, _ = post(t, base+uploadserver.PathUploadFormAsync, im.raw, "", true)
	assert.Equal(t, http.StatusConflict, code)

	require.NoError(t, conn.Close())
	st := waitStatus(t, h, func(s uploadserver.Status) bool { return !s.Busy })
	assert.Equal(t, "Error", st.Phase)
	assert.NotEmpty(t, st.Error)
	assert.False(t, st.Complete)
	t.Log("disconnect error:", st.Error)
	entries, err := os.ReadDir(filepath.Dir(o.Target))
	require.NoError(t, err)
	assert.Empty(t, entries, "no target and no temporary file after the failed upload")
	res, err, ok := h.Last()
	require.Error(t, err)
	assert.False(t, ok)
	assert.False(t, res.Complete)

	code, body = post(t, base+uploadserver.PathUpload, im.raw, "", false)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
}

// A pipe-fed upload holds the server busy until it ends.
func TestUploadBusyWhileStreaming(t *testing.T) {
	im := makeImages(t)
	o := fileTarget(t)
	h, base := serve(t, uploadserver.Options{Import: o})
	data := im.data
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPut, base+uploadserver.PathUpload, pr)
	require.NoError(t, err)
	type answer struct {
		code int
		err  error
	}
	first := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- answer{err: err}
			return
		}
		resp.Body.Close()
		first <- answer{code: resp.StatusCode}
	}()
	_, err = pw.Write(data[:1<<20])
	require.NoError(t, err)
	waitStatus(t, h, func(s uploadserver.Status) bool { return s.Busy && s.Bytes > 0 })
	code, _ := post(t, base+uploadserver.PathUpload, im.raw, "", false)
	assert.Equal(t, http.StatusConflict, code)
	_, err = pw.Write(data[1<<20:])
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	select {
	case a := <-first:
		require.NoError(t, a.err)
		assert.Equal(t, http.StatusOK, a.code)
	case <-time.After(30 * time.Second):
		t.Fatal("first upload never answered")
	}
	assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
}

func TestUploadArchive(t *testing.T) {
	dir := t.TempDir()
	tree := testtar.Sample()
	tarPath := testtar.Write(t, dir, "tree.tar", tree)
	testimg.Need(t, "gzip", "xz")
	for _, p := range []string{tarPath, testimg.Compress(t, tarPath, "gz"), testimg.Compress(t, tarPath, "xz")} {
		for _, form := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/form=%v", filepath.Base(p), form), func(t *testing.T) {
				dest := t.TempDir()
				_, base := serve(t, uploadserver.Options{Import: importer.Options{Target: dest, TargetOptions: importer.TargetOptions{ContentType: importer.ContentTypeArchive}}})
				path := uploadserver.PathUpload
				if form {
					path = uploadserver.PathUploadForm
				}
				code, body := post(t, base+path, p, "", form)
				require.Equal(t, http.StatusOK, code, body)
				testtar.Verify(t, dest, tree)
			})
		}
	}

	outside := filepath.Join(dir, "outside")
	require.NoError(t, os.Mkdir(outside, 0o755))
	for name, ms := range testtar.Hostile(outside) {
		t.Run("hostile/"+name, func(t *testing.T) {
			p := testtar.Write(t, dir, name+".tar", ms)
			dest := t.TempDir()
			_, base := serve(t, uploadserver.Options{Import: importer.Options{Target: dest, TargetOptions: importer.TargetOptions{ContentType: importer.ContentTypeArchive}}})
			code, body := post(t, base+uploadserver.PathUpload, p, "", false)
			assert.Equal(t, http.StatusBadRequest, code, body)
			assert.Contains(t, body, "unsafe image")
			entries, err := os.ReadDir(dest)
			require.NoError(t, err)
			assert.Empty(t, entries)
			entries, err = os.ReadDir(outside)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing written outside")
		})
	}
}

func TestUploadFormWithoutFile(t *testing.T) {
	o := fileTarget(t)
	h, base := serve(t, uploadserver.Options{Import: o})
	resp, err := http.Post(base+uploadserver.PathUploadForm, "multipart/form-data; boundary=xyz", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.False(t, h.Status().Busy, "a refused form frees the server")
}

// curl, as a user would run it: a sync upload with a token, a form upload,
// and a curl process killed mid-upload followed by a good retry.
func TestUploadWithCurl(t *testing.T) {
	testimg.Need(t, "curl")
	im := makeImages(t)

	t.Run("sync and form", func(t *testing.T) {
		for _, form := range []bool{false, true} {
			o := fileTarget(t)
			_, base := serve(t, uploadserver.Options{Import: o, Token: "s3cret"})
			args := []string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer s3cret"}
			if form {
				args = append(args, "-F", "file=@"+im.gz, base+uploadserver.PathUploadForm)
			} else {
				args = append(args, "-T", im.qcow2, base+uploadserver.PathUpload)
			}
			out, err := exec.Command("curl", args...).Output()
			require.NoError(t, err)
			assert.Equal(t, "200", string(out))
			assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
		}
	})

	t.Run("killed client then retry", func(t *testing.T) {
		o := fileTarget(t)
		h, base := serve(t, uploadserver.Options{Import: o})
		slow := exec.Command("curl", "-sS", "--limit-rate", "256k", "-T", im.raw, base+uploadserver.PathUpload)
		require.NoError(t, slow.Start())
		t.Cleanup(func() { _ = slow.Process.Kill(); _ = slow.Wait() })
		waitStatus(t, h, func(s uploadserver.Status) bool { return s.Busy && s.Bytes > 256<<10 })
		require.NoError(t, slow.Process.Kill())
		_ = slow.Wait()
		st := waitStatus(t, h, func(s uploadserver.Status) bool { return !s.Busy })
		assert.Equal(t, "Error", st.Phase)
		assert.False(t, st.Complete)
		assert.Contains(t, st.Error, "client disconnected")

		deadline := time.Now().Add(time.Minute) // ends at the first answer that is not 409
		var out []byte
		var err error
		for time.Now().Before(deadline) {
			out, err = exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", im.raw, base+uploadserver.PathUpload).Output()
			if err == nil && strings.TrimSpace(string(out)) != "409" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, err)
		assert.Equal(t, "200", strings.TrimSpace(string(out)))
		assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
	})
}

// A raw upload whose Content-Length is larger than the device is refused
// before a byte is written (507, ErrTargetTooSmall), sync and async: the
// device's bytes are all as they were.
func TestUploadOfRawBytesLargerThanTheDeviceRefusedBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "big.raw", 6<<20, 12)
	for _, path := range []string{uploadserver.PathUpload, uploadserver.PathUploadAsync} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			dev := testimg.LoopDevice(t, t.TempDir(), 4<<20)
			before := testimg.Digest(t, dev, -1)
			h, base := serve(t, uploadserver.Options{Import: importer.Options{Target: dev}})
			code, body := postAllowingAnEarlyAnswer(t, base+path, raw)
			if code != 0 { // else the server answered before the body was sent
				assert.Equal(t, http.StatusInsufficientStorage, code, body)
			}
			waitStatus(t, h, func(s uploadserver.Status) bool { return !s.Busy })
			_, err, ok := h.Last()
			require.False(t, ok)
			require.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.Contains(t, err.Error(), "6291456")
			assert.Equal(t, before, testimg.Digest(t, dev, -1), "the device is untouched")
		})
	}
}

// postAllowingAnEarlyAnswer posts path as the raw body with its length;
// a server that answers and closes before the whole body was sent may
// leave the client with an error instead of the answer: code 0 then.
func postAllowingAnEarlyAnswer(t *testing.T, url, path string) (int, string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, url, f)
	require.NoError(t, err)
	req.ContentLength = st.Size()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Logf("no answer read: %v", err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
