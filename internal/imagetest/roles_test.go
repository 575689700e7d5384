package imagetest

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/internal/podmantest"
	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/internal/testpki"
)

// clientName is the CLIENT_NAME of the upload-server pods below.
const clientName = "cdi-uploadproxy"

// uploadServerPod starts the image as CDI's upload-server pod (the image's
// entrypoint with CDI's argument) with mutual TLS, on a filesystem volume.
func uploadServerPod(t *testing.T, img builtImage, ca *testpki.CA, dir, addr string) (name, data, termLog string) {
	return uploadServerPodOn(t, img, ca, dir, addr, "")
}

// uploadServerPodOn is uploadServerPod on the block device dev when set
// (CDI's block pod: the device at /dev/cdi-block-volume, DESTINATION
// naming it, root with the fsGroup).
func uploadServerPodOn(t *testing.T, img builtImage, ca *testpki.CA, dir, addr, dev string) (name, data, termLog string) {
	t.Helper()
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	server := ca.Server("upload-server")
	for file, src := range map[string]string{"tls.crt": server.CertFile, "tls.key": server.KeyFile, "client-ca.crt": ca.File} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certs, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data = volumeDir(t, dir, "data")
	termLog = terminationLog(t, dir)
	host, port, _ := strings.Cut(addr, ":")
	c := podmantest.Container{
		Image: img.id,
		Args:  []string{"upload-server", "-v=3"},
		Env: []string{
			"LISTEN_ADDRESS=" + host, "LISTEN_PORT=" + port,
			"TLS_CERT_FILE=/etc/tls/tls.crt", "TLS_KEY_FILE=/etc/tls/tls.key",
			"CLIENT_CERT_FILE=/etc/tls/client-ca.crt", "CLIENT_NAME=" + clientName,
			"UPLOAD_IMAGE_SIZE=" + volumeSizeEnv, "FILESYSTEM_OVERHEAD=0",
		},
		Volumes:    []string{data + ":/data", termLog + ":/dev/termination-log", certs + ":/etc/tls:ro"},
		HostNet:    true,
		CapDropAll: true,
		ReadOnly:   true,
	}
	if dev != "" {
		c.Env = append(c.Env, "DESTINATION=/dev/cdi-block-volume")
		c.Volumes = c.Volumes[1:]
		c.Devices = []string{dev + ":/dev/cdi-block-volume"}
		c.User, c.Groups = "0:0", []string{"107"}
	}
	return img.podman.Start(c), data, termLog
}

func mtlsClient(t *testing.T, ca *testpki.CA, pair *testpki.Pair) *http.Client {
	return &http.Client{Timeout: importTimeout, Transport: &http.Transport{TLSClientConfig: testpki.ClientTLS(t, ca, pair)}}
}

// TestClonerToUploadServerMutualTLS is CDI's host-assisted clone with our
// image in both pods: the cloner (CDI's env, a filesystem source volume
// holding disk.img and another file) streams to the upload server (target
// volume) over HTTPS with mutual TLS (CLIENT_CERT_FILE, CLIENT_NAME).
func TestClonerToUploadServerMutualTLS(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	addr := freeLocalAddr(t)
	server, data, serverLog := uploadServerPod(t, img, ca, dir, addr)
	waitHealthy(t, img.podman, server, mtlsClient(t, ca, nil), "https://"+addr+"/healthz")

	source := volumeDir(t, dir, "source")
	raw := testimg.Raw(t, source, "disk.img", 8<<20, 41)
	if err := os.WriteFile(filepath.Join(source, "notes.txt"), []byte("beside the disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	client := ca.Client(clientName)
	if err := os.Mkdir(filepath.Join(dir, "cloner"), 0o755); err != nil {
		t.Fatal(err)
	}
	clonerLog := terminationLog(t, filepath.Join(dir, "cloner"))
	cloner := img.podman.Start(podmantest.Container{
		Image: img.id,
		Args:  []string{"clone-source"},
		Env: []string{
			"VOLUME_MODE=filesystem", "MOUNT_POINT=/var/run/cdi/clone/source", "PREALLOCATION=false",
			"UPLOAD_URL=https://" + addr + "/v1beta1/upload", "OWNER_UID=clone-uid",
			"CLIENT_CERT=" + string(client.CertPEM), "CLIENT_KEY=" + string(client.KeyPEM), "SERVER_CA_CERT=" + string(ca.PEM),
			"IMPORTER_METRICS_LISTEN=" + freeLocalAddr(t),
		},
		Volumes:    []string{source + ":/var/run/cdi/clone/source:ro", clonerLog + ":/dev/termination-log"},
		HostNet:    true,
		CapDropAll: true,
		ReadOnly:   true,
	})
	if code := img.podman.Wait(cloner); code != 0 {
		t.Fatalf("cloner exited %d\n%s\nupload server:\n%s", code, img.podman.Logs(cloner), img.podman.Logs(server))
	}
	if code := img.podman.Wait(server); code != 0 {
		t.Fatalf("upload server exited %d\n%s", code, img.podman.Logs(server))
	}
	if got, want := testimg.Digest(t, filepath.Join(data, "disk.img"), -1), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img: sha256 %s, want the source's %s", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(data, "notes.txt")); err != nil || string(b) != "beside the disk\n" {
		t.Errorf("notes.txt: %q, %v", b, err)
	}
	if m := readTermination(t, serverLog); m.Message != "Clone Complete" {
		t.Errorf("upload server's termination message %+v, want Clone Complete", m)
	}
	if b, _ := os.ReadFile(clonerLog); string(b) != "Clone Complete" {
		t.Errorf("cloner's termination message %q, want Clone Complete", b)
	}
}

// TestUploadServerClientCertificate is CDI's upload proxy talking to our
// upload server pod with a client certificate: only CLIENT_NAME, chained
// to CLIENT_CERT_FILE, may upload; others get 401 before anything is
// written.
func TestUploadServerClientCertificate(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	addr := freeLocalAddr(t)
	server, data, termLog := uploadServerPod(t, img, ca, dir, addr)
	waitHealthy(t, img.podman, server, mtlsClient(t, ca, nil), "https://"+addr+"/healthz")
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 4<<20, 43)
	good, wrong := ca.Client(clientName), ca.Client("someone-else")
	put := func(c *http.Client) int {
		f, err := os.Open(raw)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+"/v1beta1/upload", f)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("upload: %v\n%s", err, img.podman.Logs(server))
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for what, c := range map[string]*http.Client{"no certificate": mtlsClient(t, ca, nil), "another name": mtlsClient(t, ca, &wrong)} {
		if code := put(c); code != http.StatusUnauthorized {
			t.Errorf("%s: answered %d, want 401", what, code)
		}
		if _, err := os.Stat(filepath.Join(data, "disk.img")); err == nil {
			t.Errorf("%s: disk.img was written", what)
		}
	}
	if code := put(mtlsClient(t, ca, &good)); code != http.StatusOK {
		t.Fatalf("the proxy's upload answered %d\n%s", code, img.podman.Logs(server))
	}
	if code := img.podman.Wait(server); code != 0 {
		t.Fatalf("upload server exited %d\n%s", code, img.podman.Logs(server))
	}
	if got, want := testimg.Digest(t, filepath.Join(data, "disk.img"), 4<<20), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img: sha256 %s, want the upload's %s", got, want)
	}
	if m := readTermination(t, termLog); m.Message != "Upload Complete" {
		t.Errorf("termination message %+v, want Upload Complete", m)
	}
}

// TestClonerToUploadServerBlock is the storage-class migration between two
// machines' worth of loop devices: the cloner pod (VOLUME_MODE=block) on
// the source device, the upload-server pod on a target device of exactly
// its size, our sparse-v1 stream between them with mutual TLS, verified.
func TestClonerToUploadServerBlock(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "source.raw", 8<<20, 47)
	src := testimg.LoopDevice(t, dir, 8<<20)
	testimg.WriteDevice(t, src, raw)
	dst := testimg.LoopDevice(t, dir, 8<<20)
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	addr := freeLocalAddr(t)
	server, _, serverLog := uploadServerPodOn(t, img, ca, dir, addr, dst)
	waitHealthy(t, img.podman, server, mtlsClient(t, ca, nil), "https://"+addr+"/healthz")
	client := ca.Client(clientName)
	if err := os.Mkdir(filepath.Join(dir, "cloner"), 0o755); err != nil {
		t.Fatal(err)
	}
	clonerLog := terminationLog(t, filepath.Join(dir, "cloner"))
	cloner := img.podman.Start(podmantest.Container{
		Image: img.id,
		Args:  []string{"clone-source"},
		Env: []string{
			"VOLUME_MODE=block", "MOUNT_POINT=/dev/cdi-block-volume", "PREALLOCATION=false",
			"UPLOAD_URL=https://" + addr + "/v1beta1/upload", "OWNER_UID=clone-uid",
			"CLIENT_CERT=" + string(client.CertPEM), "CLIENT_KEY=" + string(client.KeyPEM), "SERVER_CA_CERT=" + string(ca.PEM),
			"IMPORTER_METRICS_LISTEN=" + freeLocalAddr(t),
		},
		Volumes:    []string{clonerLog + ":/dev/termination-log"},
		Devices:    []string{src + ":/dev/cdi-block-volume"},
		User:       "0:0",
		Groups:     []string{"107"},
		HostNet:    true,
		CapDropAll: true,
		ReadOnly:   true,
	})
	if code := img.podman.Wait(cloner); code != 0 {
		t.Fatalf("cloner exited %d\n%s\nupload server:\n%s", code, img.podman.Logs(cloner), img.podman.Logs(server))
	}
	if code := img.podman.Wait(server); code != 0 {
		t.Fatalf("upload server exited %d\n%s", code, img.podman.Logs(server))
	}
	if got, want := testimg.Digest(t, dst, -1), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("target device: sha256 %s, want the source's %s", got, want)
	}
	m := readTermination(t, serverLog)
	if m.Message != "Clone Complete" {
		t.Errorf("upload server's termination message %+v, want Clone Complete", m)
	}
	if logs := img.podman.Logs(cloner); !strings.Contains(logs, "protocol=sparse-v1") {
		t.Errorf("the cloner did not use sparse-v1:\n%s", logs)
	}
	if b, _ := os.ReadFile(serverLog); !strings.Contains(string(b), `"verified":true`) {
		t.Errorf("the clone was not verified: %s", b)
	}
}
