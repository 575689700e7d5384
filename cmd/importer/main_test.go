package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func runCLI(t *testing.T, stdin []byte, getenv func(string) string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, bytes.NewReader(stdin), &out, &errb, getenv)
	t.Logf("importer %s → %d\nstderr:\n%s", strings.Join(args, " "), code, errb.String())
	return code, out.String(), errb.String()
}

func decode(t *testing.T, b []byte) cdi.TerminationMessage {
	t.Helper()
	var m cdi.TerminationMessage
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(b), &m), string(b))
	assert.LessOrEqual(t, len(bytes.TrimSpace(b)), 4096)
	assert.NotContains(t, strings.TrimSpace(string(b)), "\n")
	return m
}

// failureText checks that a termination log is what CDI writes after a
// non-zero exit, one line of plain text within Kubernetes' limit, and
// returns it.
func failureText(t *testing.T, b []byte) string {
	t.Helper()
	assert.False(t, json.Valid(b), "a failure's termination log is text, not JSON: %s", b)
	assert.LessOrEqual(t, len(b), 4096)
	assert.NotContains(t, string(b), "\n")
	return string(b)
}

func TestCLIStdinToFile(t *testing.T) {
	testimg.Need(t, "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 3<<20, 21)
	zst := testimg.Compress(t, raw, "zst")
	data, err := os.ReadFile(zst)
	require.NoError(t, err)
	dest := filepath.Join(dir, "out.img")
	code, stdout, _ := runCLI(t, data, env(nil), "--json", "--checksum", testimg.FileDigest(t, zst), "-", dest)
	require.Equal(t, cdi.ExitOK, code)
	m := decode(t, []byte(stdout))
	assert.Equal(t, "Import Complete", m.Message)
	assert.Equal(t, "raw", m.SourceFormat)
	assert.Equal(t, "zst", m.Compression)
	assert.EqualValues(t, 3<<20, m.VirtualSize)
	assert.Equal(t, testimg.FileDigest(t, zst), m.Checksum)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}

func TestCLIFailureExitsNonZero(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	tlog := filepath.Join(dir, "result.json")
	code, _, stderr := runCLI(t, nil, env(nil), "--termination-log", tlog, srv.URL+"/disk.img", filepath.Join(dir, "disk.img"))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "404 Not Found")
	b, err := os.ReadFile(tlog)
	require.NoError(t, err)
	m := decode(t, b)
	assert.Contains(t, m.Message, "404 Not Found")
	assert.NotContains(t, m.Message, "Import Complete")
	_, err = os.Stat(filepath.Join(dir, "disk.img"))
	assert.True(t, os.IsNotExist(err))
}

func TestCLIUsage(t *testing.T) {
	code, _, stderr := runCLI(t, nil, env(nil))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "SOURCE and DEST are required")
	code, _, _ = runCLI(t, nil, env(nil), "--size", "lots", "a", "b")
	assert.Equal(t, cdi.ExitUsage, code)
}

// cdiRoot makes a directory tree with CDI's fixed paths under a prefix.
func cdiRoot(t *testing.T) string {
	root := t.TempDir()
	for _, d := range []string{"data", "scratch", "dev"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	return root
}

func TestEnvContractFilesystem(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	raw, q := testimg.RawAndQCOW2(t, dir, 4<<20, 22)
	xz := testimg.Compress(t, q, "xz")
	base := testimg.Serve(t, dir)
	root := cdiRoot(t)
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":         "http",
		"IMPORTER_ENDPOINT":       base + filepath.Base(xz),
		"IMPORTER_CONTENTTYPE":    "kubevirt",
		"IMPORTER_IMAGE_SIZE":     "64Mi",
		"FILESYSTEM_OVERHEAD":     "0.06",
		"PREALLOCATION":           "false",
		"IMPORTER_CHECKSUM":       testimg.FileDigest(t, xz),
		"IMPORTER_EXTRA_HEADER_0": "X-Test: yes",
		"IMPORTER_PATH_PREFIX":    root,
	}))
	require.Equal(t, cdi.ExitOK, code)
	// The qcow2.xz stream is decoded straight onto the volume.
	for _, phase := range []string{"Info", "TransferDataFile", "Resize", "Complete"} {
		assert.Contains(t, stderr, "New phase: "+phase)
	}
	assert.NotContains(t, stderr, "New phase: TransferScratch")
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	m := decode(t, b)
	assert.Equal(t, "Import Complete", m.Message)
	assert.False(t, m.ScratchSpaceRequired)
	assert.Equal(t, "qcow2", m.SourceFormat)
	img := filepath.Join(root, "data/disk.img")
	st, err := os.Stat(img)
	require.NoError(t, err)
	assert.EqualValues(t, 60<<20, st.Size())
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, img, 4<<20))
	ents, err := os.ReadDir(filepath.Join(root, "scratch"))
	require.NoError(t, err)
	assert.Empty(t, ents, "scratch not cleaned")
}

func TestEnvContractBlock(t *testing.T) {
	testimg.Need(t, "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 23)
	gz := testimg.Compress(t, raw, "gz")
	base := testimg.Serve(t, dir)
	loop := testimg.LoopDevice(t, dir, 8<<20)
	root := cdiRoot(t)
	require.NoError(t, os.Symlink(loop, filepath.Join(root, "dev/cdi-block-volume")))
	code, _, _ := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":      "http",
		"IMPORTER_ENDPOINT":    base + filepath.Base(gz),
		"IMPORTER_IMAGE_SIZE":  "8Mi",
		"PREALLOCATION":        "false",
		"IMPORTER_PATH_PREFIX": root,
	}))
	require.Equal(t, cdi.ExitOK, code)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, loop, 4<<20))
	_, err := os.Stat(filepath.Join(root, "data/disk.img"))
	assert.True(t, os.IsNotExist(err), "block mode must not write /data/disk.img")
}

func TestEnvChecksumMismatchExitsZeroWithMessage(t *testing.T) {
	dir := t.TempDir()
	testimg.Raw(t, dir, "disk.raw", 1<<20, 24)
	base := testimg.Serve(t, dir)
	root := cdiRoot(t)
	code, _, _ := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":      "http",
		"IMPORTER_ENDPOINT":    base + "disk.raw",
		"IMPORTER_CHECKSUM":    "sha256:" + strings.Repeat("0", 64),
		"IMPORTER_PATH_PREFIX": root,
	}))
	assert.Equal(t, cdi.ExitOK, code)
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	m := decode(t, b)
	assert.Contains(t, m.Message, "checksum mismatch")
	_, err = os.Stat(filepath.Join(root, "data/disk.img"))
	assert.True(t, os.IsNotExist(err))
}

func TestEnvUnsupportedSource(t *testing.T) {
	root := cdiRoot(t)
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":      "vddk",
		"IMPORTER_ENDPOINT":    "https://vcenter/sdk",
		"IMPORTER_PATH_PREFIX": root,
	}))
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "not supported by this importer (supported: http, s3, gcs, registry, clone, none and upload)")
	b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	require.NoError(t, err)
	assert.Equal(t, "IMPORTER_SOURCE=vddk is not supported by this importer (supported: http, s3, gcs, registry, clone, none and upload): invalid options", failureText(t, b))
}

// TestBinary runs the real binary as a process, as a person would.
func TestBinary(t *testing.T) {
	dir, bin := builtImporter(t)
	raw := testimg.Raw(t, dir, "disk.raw", 2<<20, 25)
	dest := filepath.Join(dir, "copy.img")
	cmd := exec.Command(bin, "--json", raw, dest)
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "Import Complete", decode(t, out).Message)
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}

// A new DEST file gets what the umask allows of 0666, or --mode.
func TestCLIFileModeFollowsUmask(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 3)
	old := unix.Umask(0o027)
	t.Cleanup(func() { unix.Umask(old) })

	mode := func(args ...string) os.FileMode {
		dest := filepath.Join(t.TempDir(), "disk.img")
		code, _, _ := runCLI(t, nil, env(nil), append(args, src, dest)...)
		require.Equal(t, cdi.ExitOK, code)
		st, err := os.Stat(dest)
		require.NoError(t, err)
		return st.Mode().Perm()
	}
	assert.Equal(t, os.FileMode(0o640), mode())
	assert.Equal(t, os.FileMode(0o600), mode("--mode", "0600"))
	unix.Umask(0o002)
	assert.Equal(t, os.FileMode(0o664), mode())

	code, _, stderr := runCLI(t, nil, env(nil), "--mode", "rw", src, filepath.Join(dir, "x.img"))
	assert.Equal(t, cdi.ExitUsage, code)
	assert.Contains(t, stderr, "--mode")
}

// TestEnvHTTPSourceTakesOnlyHTTPURLs: with IMPORTER_SOURCE=http, CDI fetches
// over HTTP only. The engine also reads local files, so without the check an
// endpoint naming a file in the pod (a service-account token, say) would be
// copied into the volume and reported complete.
func TestEnvHTTPSourceTakesOnlyHTTPURLs(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "token")
	require.NoError(t, os.WriteFile(secret, []byte("eyJhbGciOi-pod-service-account-token"), 0o600))

	cases := map[string]struct {
		endpoint string
		want     string
	}{
		"file URL":          {"file://" + secret, `scheme "file", want http or https`},
		"bare path":         {secret, "is a path, not an http or https URL"},
		"relative path":     {"token", "is a path, not an http or https URL"},
		"other scheme":      {"ftp://127.0.0.1/disk.img", `scheme "ftp", want http or https`},
		"http without host": {"http:" + secret, "has no host"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := cdiRoot(t)
			code, _, stderr := runCLI(t, nil, env(map[string]string{
				"IMPORTER_SOURCE":      "http",
				"IMPORTER_ENDPOINT":    tc.endpoint,
				"IMPORTER_PATH_PREFIX": root,
			}))
			assert.Equal(t, cdi.ExitFailed, code)
			assert.Contains(t, stderr, tc.want)
			b, err := os.ReadFile(filepath.Join(root, "dev/termination-log"))
			require.NoError(t, err)
			text := failureText(t, b)
			assert.Contains(t, text, tc.want)
			assert.NotContains(t, text, "Import Complete")
			_, err = os.Stat(filepath.Join(root, "data/disk.img"))
			assert.True(t, os.IsNotExist(err), "nothing may be written to the volume")
		})
	}
}

// pacedServer serves data at every path with its Content-Length and no
// ranges, paced at chunk bytes every delay (0: at once). With dropAt > 0
// the first request's connection is cut after dropAt bytes and every later
// request (a resume or a restart) is refused with 403.
func pacedServer(t *testing.T, data []byte, chunk int, delay time.Duration, dropAt int) *httptest.Server {
	t.Helper()
	srv, _ := pacedServerSending(t, data, chunk, delay, dropAt)
	return srv
}

// pacedServerSending is pacedServer, and a channel closed once its first
// chunk went out: the import is under way (its signal handling in place),
// which a test waits for instead of guessing how long a start takes.
func pacedServerSending(t *testing.T, data []byte, chunk int, delay time.Duration, dropAt int) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	var requests atomic.Int32
	sending := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if dropAt > 0 && requests.Add(1) > 1 {
			http.Error(w, "no second chance", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		end := len(data)
		if dropAt > 0 {
			end = dropAt
		}
		for off := 0; off < end; off += chunk {
			if _, err := w.Write(data[off:min(off+chunk, end)]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			once.Do(func() { close(sending) })
			if delay > 0 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(delay):
				}
			}
		}
		if dropAt > 0 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, sending
}
