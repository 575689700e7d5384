package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testConfig(t *testing.T, imageDir string) config {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	shared := t.TempDir()
	return config{
		host: "127.0.0.1", port: port, imageDir: imageDir,
		readyFile: filepath.Join(shared, "ready"), doneFile: filepath.Join(shared, "done"),
		env:    []string{"PATH=/bin", "INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small"},
		root:   t.TempDir(),
		logger: log.New(io.Discard, "", 0),
		poll:   20 * time.Millisecond,
	}
}

// start runs serve in the background; its error arrives on the channel.
// The test's cleanup stops it if it still runs.
func start(t *testing.T, c config) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	stopped := make(chan struct{})
	go func() { exited <- serve(ctx, c); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	return exited
}

// waitReady polls for the ready file and returns at its first sight; the
// minute is only for a server that never writes it.
func waitReady(t *testing.T, c config) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(c.readyFile); err == nil {
			return string(b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no ready file")
	return ""
}

func TestServesTheDiskWithRangesAndInfoUntilDone(t *testing.T) {
	img := t.TempDir()
	content := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	require.NoError(t, os.WriteFile(filepath.Join(img, "fedora.qcow2"), content, 0o644))
	c := testConfig(t, img)
	exited := start(t, c)
	assert.Equal(t, "fedora.qcow2", waitReady(t, c), "the ready file names the disk file")
	base := "http://127.0.0.1:" + strconv.Itoa(c.port)

	req, err := http.NewRequest(http.MethodGet, base+"/fedora.qcow2", nil)
	require.NoError(t, err)
	req.Header.Set("Range", "bytes=16-31")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, content[16:32], body)

	resp, err = http.Get(base + "/info")
	require.NoError(t, err)
	var info struct {
		Env []string `json:"env"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&info))
	resp.Body.Close()
	assert.Equal(t, c.env, info.Env)

	select {
	case err := <-exited:
		t.Fatalf("exited before the done file: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, os.WriteFile(c.doneFile, nil, 0o644))
	select {
	case err := <-exited:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("still serving 10 s after the done file appeared")
	}
	_, err = os.Stat(c.readyFile)
	assert.True(t, os.IsNotExist(err), "the ready file is removed")
	_, err = http.Get(base + "/info")
	assert.Error(t, err, "no longer listening")
}

func TestRefusesWhatIsNotAContainerdisk(t *testing.T) {
	empty := t.TempDir()
	err := serve(context.Background(), testConfig(t, empty))
	assert.ErrorContains(t, err, "holds 0 entries")

	two := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(two, "a.img"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(two, "b.img"), nil, 0o644))
	assert.ErrorContains(t, serve(context.Background(), testConfig(t, two)), "holds 2 entries")

	sub := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(sub, "disk"), 0o755))
	assert.ErrorContains(t, serve(context.Background(), testConfig(t, sub)), "not a file")

	img := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(img, "disk.img"), nil, 0o644))
	c := testConfig(t, img)
	require.NoError(t, os.Mkdir(filepath.Join(c.root, "ostree"), 0o755))
	assert.ErrorContains(t, serve(context.Background(), c), "bootc image detected")
	_, err = os.Stat(c.readyFile)
	assert.True(t, os.IsNotExist(err), "never ready")
}

// TestRefusesAnEntryThatLeadsOutOfTheImageDirectory: the one entry may be
// a symlink, but one resolving outside the image directory (absolute or
// through ..) is refused at start, and a name swapped for such a symlink
// while serving is not followed.
func TestRefusesAnEntryThatLeadsOutOfTheImageDirectory(t *testing.T) {
	parent := t.TempDir()
	secret := filepath.Join(parent, "outside", "secret")
	require.NoError(t, os.Mkdir(filepath.Dir(secret), 0o755))
	require.NoError(t, os.WriteFile(secret, []byte("the node's secret\n"), 0o600))
	for _, tc := range []struct{ name, target string }{{"absolute", secret}, {"relative", "../outside/secret"}} {
		img := filepath.Join(parent, "img-"+tc.name)
		require.NoError(t, os.Mkdir(img, 0o755))
		require.NoError(t, os.Symlink(tc.target, filepath.Join(img, "disk.img")))
		_, err := os.Stat(filepath.Join(img, "disk.img"))
		require.NoError(t, err, "%s: the symlink resolves (outside)", tc.name)
		c := testConfig(t, img)
		// A server that accepted the entry would serve until ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = serve(ctx, c)
		cancel()
		assert.ErrorContains(t, err, "does not resolve to a file inside it", tc.name)
	}

	img := filepath.Join(parent, "img")
	require.NoError(t, os.Mkdir(img, 0o755))
	disk := filepath.Join(img, "disk.img")
	require.NoError(t, os.WriteFile(disk, []byte("disk"), 0o644))
	c := testConfig(t, img)
	start(t, c)
	waitReady(t, c)
	require.NoError(t, os.Remove(disk))
	require.NoError(t, os.Symlink(secret, disk))
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(c.port) + "/disk.img")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.NotEqual(t, http.StatusOK, resp.StatusCode)
	assert.NotContains(t, string(body), "secret")
}
