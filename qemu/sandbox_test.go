package qemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/nbdserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests show what the sandbox is for: with the engine's own image
// checks out of the way (the Runner is called directly), a hostile image
// still cannot make qemu-img read a host file or reach the network. Each
// attack is also run unconfined, to prove that it works there and so that
// the confined assertion can fail.

// secretFile writes 1 MiB of recognisable bytes in a directory of its own,
// outside anything a Runner call is given.
func secretFile(t *testing.T) (string, []byte) {
	t.Helper()
	secret := bytes.Repeat([]byte("TOP-SECRET host file, must never reach a target\n"), 1<<20/48+1)[:1<<20]
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, secret, 0o600))
	return p, secret
}

// hostileVMDK turns a monolithicSparse vmdk into one whose header says
// capacity 0, which makes qemu read its embedded descriptor as a
// descriptor file, and whose descriptor names a FLAT extent at extent.
func hostileVMDK(t *testing.T, dir, extent string) string {
	t.Helper()
	p := filepath.Join(dir, "hostile.vmdk")
	qemuImg(t, "create", "-q", "-f", "vmdk", p, "1M")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	var hdr [64]byte
	_, err = f.ReadAt(hdr[:], 0)
	require.NoError(t, err)
	require.Equal(t, "KDMV", string(hdr[:4]))
	descOffset := int64(binary.LittleEndian.Uint64(hdr[28:])) * 512
	descSize := int(binary.LittleEndian.Uint64(hdr[36:])) * 512
	require.NotZero(t, descOffset, "qemu-img made no embedded descriptor")
	binary.LittleEndian.PutUint64(hdr[12:], 0) // capacity
	_, err = f.WriteAt(hdr[:], 0)
	require.NoError(t, err)
	desc := fmt.Sprintf("# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\n"+
		"createType=\"monolithicFlat\"\n\n# Extent description\nRW 2048 FLAT \"%s\" 0\n\n"+
		"ddb.virtualHWVersion = \"4\"\nddb.adapterType = \"ide\"\n", extent)
	buf := make([]byte, descSize)
	require.Less(t, len(desc), len(buf))
	copy(buf, desc)
	_, err = f.WriteAt(buf, descOffset)
	require.NoError(t, err)
	return p
}

func TestSandboxReportsLandlock(t *testing.T) {
	requireLandlock(t)
	assert.Regexp(t, `^landlock v[0-9]+$`, (&Runner{}).Sandbox())
	assert.Equal(t, "rlimits only", (&Runner{unconfined: true}).Sandbox())
}

func TestSandboxStopsVmdkExtentReadingHostFile(t *testing.T) {
	requireTools(t)
	requireLandlock(t)
	secretPath, secret := secretFile(t)
	dir := t.TempDir()
	img := hostileVMDK(t, dir, secretPath)
	ctx := context.Background()

	// Unconfined, the descriptor's extent is the secret, and it is copied.
	open := &Runner{unconfined: true}
	info, err := open.Info(ctx, img, "vmdk")
	require.NoError(t, err)
	assert.Contains(t, info.ExtentFilenames, secretPath)
	leaked := filepath.Join(dir, "leaked.raw")
	_, err = open.Convert(ctx, img, leaked, ConvertOptions{SrcFormat: "vmdk", DstFormat: "raw"})
	require.NoError(t, err)
	requireSameContent(t, secret, leaked)

	// Confined, qemu-img may open the image but not the file it names.
	r := &Runner{}
	_, err = r.Info(ctx, img, "vmdk")
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	assert.Contains(t, err.Error(), "Permission denied")
	assert.Contains(t, err.Error(), secretPath)
	for _, tc := range []struct {
		name   string
		exists bool
	}{{"new target", false}, {"existing target", true}} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.raw")
			if tc.exists {
				require.NoError(t, os.WriteFile(out, nil, 0o644))
			}
			_, err := r.Convert(ctx, img, out, ConvertOptions{SrcFormat: "vmdk", DstFormat: "raw"})
			require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
			assert.Contains(t, err.Error(), "Permission denied")
			got, _ := os.ReadFile(out)
			assert.False(t, bytes.Contains(got, secret[:64]), "the target holds the secret")
			if !tc.exists {
				assert.NoFileExists(t, out, "a failed convert leaves no target it created")
			}
		})
	}
	require.ErrorIs(t, r.Check(ctx, img, "vmdk"), errdefs.ErrUnsafeImage)
}

func TestSandboxStopsAbsoluteBackingFile(t *testing.T) {
	requireTools(t)
	requireLandlock(t)
	secretPath, secret := secretFile(t)
	dir := t.TempDir()
	top := filepath.Join(dir, "top.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-b", secretPath, "-F", "raw", top, "1M")
	ctx := context.Background()

	leaked := filepath.Join(dir, "leaked.raw")
	_, err := (&Runner{unconfined: true}).Convert(ctx, top, leaked, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
	require.NoError(t, err)
	requireSameContent(t, secret, leaked)

	r := &Runner{}
	out := filepath.Join(dir, "out.raw")
	_, err = r.Convert(ctx, top, out, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	assert.Contains(t, err.Error(), "Permission denied")
	assert.NoFileExists(t, out)
	require.ErrorIs(t, r.Check(ctx, top, "qcow2"), errdefs.ErrUnsafeImage)
	_, err = r.Compare(ctx, CompareImage{Path: top, Format: "qcow2"}, CompareImage{Path: leaked, Format: "raw"})
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
}

// A library directory is no longer granted whole: a backing file under
// /usr/lib that qemu-img does not load (os-release, on systemd
// distributions) is denied like any other host file.
func TestSandboxStopsReadingUnloadedLibraryFile(t *testing.T) {
	requireTools(t)
	requireLandlock(t)
	const hostFile = "/usr/lib/os-release"
	want, err := os.ReadFile(hostFile)
	if err != nil || len(want) == 0 {
		t.Skipf("%s not there to test with: %v", hostFile, err)
	}
	dir := t.TempDir()
	top := filepath.Join(dir, "top.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-b", hostFile, "-F", "raw", top, "64K")
	ctx := context.Background()

	leaked := filepath.Join(dir, "leaked.raw")
	_, err = (&Runner{unconfined: true}).Convert(ctx, top, leaked, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
	require.NoError(t, err)
	got, err := os.ReadFile(leaked)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(got, want), "unconfined, the backing file's bytes are copied")

	out := filepath.Join(dir, "out.raw")
	_, err = (&Runner{}).Convert(ctx, top, out, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	assert.Contains(t, err.Error(), "Permission denied")
	assert.NoFileExists(t, out)
}

// countingListener accepts the connections that reach 127.0.0.1:port and
// closes them (qemu-img then fails fast).
type countingListener struct {
	port     int
	accepted chan string // each accepted connection's remote address, in order
}

func tcpListener(t *testing.T) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	l := &countingListener{port: ln.Addr().(*net.TCPAddr).Port, accepted: make(chan string, 64)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			l.accepted <- c.RemoteAddr().String()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// connectedSince counts the connections that reached the listener since
// the last call. It connects once more itself and counts what is accepted
// before its own: a connection whose connect returned is in the kernel's
// accept queue, taken in order, so once a program that connected has
// exited the count is exact, with no pause guessed for the accept loop.
func (l *countingListener) connectedSince(t *testing.T) int {
	t.Helper()
	c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", l.port))
	require.NoError(t, err)
	defer c.Close()
	mine, n := c.LocalAddr().String(), 0
	for {
		select {
		case a := <-l.accepted:
			if a == mine {
				return n
			}
			n++
		case <-time.After(time.Minute): // only if the accept loop died
			t.Fatal("the listener did not accept the test's own connection")
		}
	}
}

func TestSandboxDeniesNetwork(t *testing.T) {
	requireTools(t)
	requireLandlock(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		source func(port int) (name, format string)
		// unsafe: qemu-img reports the denied connect as such (its curl
		// driver turns it into a generic "Couldn't connect to server").
		unsafe bool
	}{
		{name: "json nbd tcp", unsafe: true, source: func(port int) (string, string) {
			b, _ := json.Marshal(map[string]any{"driver": "raw", "file": map[string]any{"driver": "nbd",
				"server": map[string]any{"type": "inet", "host": "127.0.0.1", "port": fmt.Sprint(port)}}})
			return "json:" + string(b), "raw"
		}},
		{name: "qcow2 with nbd:// backing", unsafe: true, source: func(port int) (string, string) {
			p := filepath.Join(t.TempDir(), "nbd-backed.qcow2")
			qemuImg(t, "create", "-q", "-f", "qcow2", "-u", "-b", fmt.Sprintf("nbd://127.0.0.1:%d", port), "-F", "raw", p, "1M")
			return p, "qcow2"
		}},
		{name: "qcow2 with http:// backing", source: func(port int) (string, string) {
			p := filepath.Join(t.TempDir(), "http-backed.qcow2")
			qemuImg(t, "create", "-q", "-f", "qcow2", "-u", "-b", fmt.Sprintf("http://127.0.0.1:%d/disk.raw", port), "-F", "raw", p, "1M")
			return p, "qcow2"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := tcpListener(t)
			src, format := tc.source(l.port)
			out := filepath.Join(t.TempDir(), "out.raw")
			_, err := (&Runner{unconfined: true}).Convert(ctx, src, out, ConvertOptions{SrcFormat: format, DstFormat: "raw"})
			require.Error(t, err, "the listener closes every connection")
			require.Positive(t, l.connectedSince(t), "unconfined qemu-img must reach the listener, or this test proves nothing")

			_, err = (&Runner{}).Convert(ctx, src, out, ConvertOptions{SrcFormat: format, DstFormat: "raw"})
			require.Error(t, err)
			t.Log(err)
			assert.Zero(t, l.connectedSince(t), "confined qemu-img connected to 127.0.0.1:%d", l.port)
			if tc.unsafe {
				require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
			}
		})
	}
}

// serveNBD serves data read-only on a Unix socket, as the engine's ranged
// path does, and returns a qemu-img filename for it.
func serveNBD(t *testing.T, data []byte) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "image.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := nbdserver.New(bytes.NewReader(data), int64(len(data)), nil)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("NBD server did not stop")
		}
	})
	file := map[string]any{"driver": "nbd", "server": map[string]any{"type": "unix", "path": sock}}
	b, err := json.Marshal(map[string]any{"backing": nil, "file": file})
	require.NoError(t, err)
	return "json:" + string(b)
}

func TestSandboxedOperationsWork(t *testing.T) {
	requireTools(t)
	requireLandlock(t)
	_, raw, q, data := makeQCOW2(t, "x.qcow2")
	r := &Runner{}
	ctx := context.Background()

	t.Run("qcow2 read over an NBD unix socket", func(t *testing.T) {
		qcow, err := os.ReadFile(q)
		require.NoError(t, err)
		src := serveNBD(t, qcow)
		info, err := r.Info(ctx, src, "qcow2")
		require.NoError(t, err)
		assert.EqualValues(t, rawSize, info.VirtualSize)
		require.NoError(t, r.Check(ctx, src, "qcow2"))
		out := filepath.Join(t.TempDir(), "nbd.raw")
		_, err = r.Convert(ctx, src, out, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw", CacheMode: "none"})
		require.NoError(t, err)
		requireSameContent(t, data, out)
	})
	t.Run("qcow2 to a loop device", func(t *testing.T) {
		dev := attachLoop(t, rawSize)
		_, err := r.Convert(ctx, q, dev, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw", CacheMode: "none", TargetExists: true})
		require.NoError(t, err)
		requireSameContent(t, data, dev)
		_, err = r.Compare(ctx, CompareImage{Path: q, Format: "qcow2"}, CompareImage{Path: dev, Format: "raw", Size: rawSize})
		require.NoError(t, err)
	})
	t.Run("compare", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "c.raw")
		_, err := r.Convert(ctx, q, out, ConvertOptions{SrcFormat: "qcow2", DstFormat: "raw"})
		require.NoError(t, err)
		_, err = r.Compare(ctx, CompareImage{Path: q, Format: "qcow2"}, CompareImage{Path: out, Format: "raw"})
		require.NoError(t, err)
		f, err := os.OpenFile(out, os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte{0x42}, 3<<20) // inside the hole
		require.NoError(t, err)
		require.NoError(t, f.Close())
		report, err := r.Compare(ctx, CompareImage{Path: q, Format: "qcow2"}, CompareImage{Path: out, Format: "raw"})
		require.ErrorIs(t, err, ErrImagesDiffer)
		assert.Contains(t, report, "mismatch")
	})
	t.Run("qcow2 target created by qemu-img", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "sub dir, with comma")
		require.NoError(t, os.Mkdir(out, 0o755))
		out = filepath.Join(out, "o.qcow2")
		_, err := r.Convert(ctx, raw, out, ConvertOptions{SrcFormat: "raw", DstFormat: "qcow2", Preallocate: true})
		require.NoError(t, err)
		_, err = r.Compare(ctx, CompareImage{Path: raw, Format: "raw"}, CompareImage{Path: out, Format: "qcow2"})
		require.NoError(t, err)
	})
}

func TestNamedResources(t *testing.T) {
	files, sockets, err := namedResources("/a/b.qcow2")
	require.NoError(t, err)
	assert.Equal(t, []string{"/a/b.qcow2"}, files)
	assert.Empty(t, sockets)

	// A writable NBD export of the target, as a convert destination.
	files, sockets, err = namedResources(`json:{"driver":"raw","file":{"driver":"nbd","server":{"type":"unix","path":"/run/t.sock"}}}`)
	require.NoError(t, err)
	assert.Empty(t, files)
	assert.Equal(t, []string{"/run/t.sock"}, sockets)

	files, sockets, err = namedResources(`json:{"driver":"qcow2","file":{"driver":"file","filename":"/x/y"},"backing":{"file":{"driver":"nbd","server":{"type":"inet","host":"h","port":"1"}}}}`)
	require.NoError(t, err)
	assert.Equal(t, []string{"/x/y"}, files)
	assert.Empty(t, sockets, "a TCP server gets no access")

	_, _, err = namedResources("json:{not json")
	require.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}
