package imagetest

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testpki"
)

const (
	// clientName is the CLIENT_NAME of the upload-server pods below (CDI's
	// upload proxy).
	clientName = "cdi-uploadproxy"
	// uploadService is the name the cloner reaches the upload server by,
	// as CDI's clone controller names the target's upload Service; the
	// server certificate carries it.
	uploadService = "cdi-upload-target.default.svc"
	// uploadPort is CDI's upload server port (common.UploadServerPort).
	uploadPort = "8443"
)

// uploadServerPod is a started upload-server pod.
type uploadServerPod struct {
	name, data, termLog string
	url                 string // https://IP:8443, the pod's address
}

// startUploadServer starts the image as CDI's upload-server pod: its own
// entrypoint with CDI's argument, CDI's environment (the certificates
// under /etc/tls/ as the controller mounts its Secret), its own network
// namespace listening on CDI's 8443, a filesystem volume at /data (or the
// block device dev at /dev/cdi-block-volume, DESTINATION naming it, as
// root with the fsGroup).
func startUploadServer(t *testing.T, img builtImage, ca *testpki.CA, dir, dev string) uploadServerPod {
	t.Helper()
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	server := ca.Server("upload-server", uploadService)
	for file, src := range map[string]string{"tls.crt": server.CertFile, "tls.key": server.KeyFile, "ca.crt": ca.File} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certs, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := uploadServerPod{data: volumeDir(t, dir, "data"), termLog: terminationLog(t, dir)}
	c := podmantest.Container{
		Image: img.id,
		Args:  cdiArgs,
		// upload-controller.go makeUploadPodContainers.
		Env: []string{
			"TLS_KEY_FILE=/etc/tls/tls.key", "TLS_CERT_FILE=/etc/tls/tls.crt", "CLIENT_CERT_FILE=/etc/tls/ca.crt",
			"FILESYSTEM_OVERHEAD=0", "UPLOAD_IMAGE_SIZE=" + volumeSizeEnv, "CLIENT_NAME=" + clientName,
			"PREALLOCATION=false", "TLS_CIPHERS=", "TLS_MIN_VERSION=",
		},
		Volumes:    []string{p.data + ":/data", p.termLog + ":/dev/termination-log", certs + ":/etc/tls:ro"},
		Groups:     []string{"107"},
		CapDropAll: true,
	}
	if dev != "" {
		c.Env = append(c.Env, "DESTINATION=/dev/cdi-block-volume")
		c.Volumes = c.Volumes[1:]
		c.Devices = []string{dev + ":/dev/cdi-block-volume"}
		c.User = "0:0"
	}
	p.name = img.podman.Start(c)
	p.url = "https://" + img.podman.IP(p.name) + ":" + uploadPort
	return p
}

// mtlsClient trusts ca for the upload server's name and presents pair
// (none when nil).
func mtlsClient(t *testing.T, ca *testpki.CA, pair *testpki.Pair) *http.Client {
	c := testpki.ClientTLS(t, ca, pair)
	c.ServerName = uploadService
	return &http.Client{Timeout: importTimeout, Transport: &http.Transport{TLSClientConfig: c}}
}

// clonerPod is the image as CDI's clone-source pod: its own entrypoint and
// no argument, CDI's environment (clone-controller.go
// CreateCloneSourcePod) and nothing else, in a network namespace of its
// own (its metric on 8443 there) that resolves the upload Service to the
// upload server's pod.
func clonerPod(img builtImage, ca *testpki.CA, server uploadServerPod, termLog string, env ...string) podmantest.Container {
	client := ca.Client(clientName)
	ip := strings.TrimSuffix(strings.TrimPrefix(server.url, "https://"), ":"+uploadPort)
	return podmantest.Container{
		Image: img.id,
		Env: append([]string{
			"CLIENT_KEY=" + string(client.KeyPEM), "CLIENT_CERT=" + string(client.CertPEM), "SERVER_CA_CERT=" + string(ca.PEM),
			"UPLOAD_URL=https://" + uploadService + ":" + uploadPort + "/v1beta1/upload", "OWNER_UID=clone-uid", "PREALLOCATION=false",
		}, env...),
		Volumes:    []string{termLog + ":/dev/termination-log"},
		CapDropAll: true,
		Extra:      []string{"--add-host", uploadService + ":" + ip},
	}
}

// assertFirstLogLine checks the first line a container logged.
func assertFirstLogLine(t *testing.T, p *podmantest.Podman, name, want string) {
	t.Helper()
	logs := p.Logs(name)
	if first, _, _ := strings.Cut(logs, "\n"); !strings.Contains(first, want) {
		t.Errorf("first log line %q, want it to contain %q; whole log:\n%s", first, want, logs)
	}
}

// TestClonerToUploadServerMutualTLS is CDI's host-assisted clone with our
// image in both pods, each started as CDI starts it: the cloner (a
// filesystem source volume holding disk.img and another file) streams to
// the upload server (the target volume) over HTTPS with mutual TLS
// (CLIENT_CERT_FILE, CLIENT_NAME); each names its role first.
func TestClonerToUploadServerMutualTLS(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	server := startUploadServer(t, img, ca, dir, "")
	waitHealthy(t, img.podman, server.name, mtlsClient(t, ca, nil), server.url+"/healthz")

	source := volumeDir(t, dir, "source")
	raw := testimg.Raw(t, source, "disk.img", 8<<20, 41)
	if err := os.WriteFile(filepath.Join(source, "notes.txt"), []byte("beside the disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "cloner"), 0o755); err != nil {
		t.Fatal(err)
	}
	clonerLog := terminationLog(t, filepath.Join(dir, "cloner"))
	c := clonerPod(img, ca, server, clonerLog, "VOLUME_MODE=filesystem", "MOUNT_POINT=/var/run/cdi/clone/source")
	c.Volumes = append(c.Volumes, source+":/var/run/cdi/clone/source:ro")
	c.Groups = []string{"107"}
	cloner := img.podman.Start(c)
	if code := img.podman.Wait(cloner); code != 0 {
		t.Fatalf("cloner exited %d\n%s\nupload server:\n%s", code, img.podman.Logs(cloner), img.podman.Logs(server.name))
	}
	if code := img.podman.Wait(server.name); code != 0 {
		t.Fatalf("upload server exited %d\n%s", code, img.podman.Logs(server.name))
	}
	assertFirstLogLine(t, img.podman, server.name, `msg="Running as CDI's upload-server pod" role=upload-server`)
	assertFirstLogLine(t, img.podman, cloner, `msg="Running as CDI's clone-source pod" role=clone-source`)
	if got, want := testimg.Digest(t, filepath.Join(server.data, "disk.img"), -1), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img: sha256 %s, want the source's %s", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(server.data, "notes.txt")); err != nil || string(b) != "beside the disk\n" {
		t.Errorf("notes.txt: %q, %v", b, err)
	}
	if m := readTermination(t, server.termLog); m.Message != "Clone Complete" {
		t.Errorf("upload server's termination message %+v, want Clone Complete", m)
	}
	if b, _ := os.ReadFile(clonerLog); string(b) != "Clone Complete" {
		t.Errorf("cloner's termination message %q, want Clone Complete", b)
	}
}

// TestUploadServerClientCertificate is CDI's upload proxy talking to our
// upload-server pod, started as CDI starts it, on its port 8443: only
// CLIENT_NAME, chained to CLIENT_CERT_FILE, may upload; others get 401
// before anything is written; the proxy's upload is imported.
func TestUploadServerClientCertificate(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	server := startUploadServer(t, img, ca, dir, "")
	waitHealthy(t, img.podman, server.name, mtlsClient(t, ca, nil), server.url+"/healthz")
	assertFirstLogLine(t, img.podman, server.name, `msg="Running as CDI's upload-server pod" role=upload-server chosenBy=TLS_CERT_FILE,TLS_KEY_FILE,CLIENT_CERT_FILE,CLIENT_NAME,UPLOAD_IMAGE_SIZE`)
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 4<<20, 43)
	good, wrong := ca.Client(clientName), ca.Client("someone-else")
	put := func(c *http.Client) int {
		f, err := os.Open(raw)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		req, err := http.NewRequest(http.MethodPost, server.url+"/v1beta1/upload", f)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("upload: %v\n%s", err, img.podman.Logs(server.name))
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for what, c := range map[string]*http.Client{"no certificate": mtlsClient(t, ca, nil), "another name": mtlsClient(t, ca, &wrong)} {
		if code := put(c); code != http.StatusUnauthorized {
			t.Errorf("%s: answered %d, want 401", what, code)
		}
		if _, err := os.Stat(filepath.Join(server.data, "disk.img")); err == nil {
			t.Errorf("%s: disk.img was written", what)
		}
	}
	if code := put(mtlsClient(t, ca, &good)); code != http.StatusOK {
		t.Fatalf("the proxy's upload answered %d\n%s", code, img.podman.Logs(server.name))
	}
	if code := img.podman.Wait(server.name); code != 0 {
		t.Fatalf("upload server exited %d\n%s", code, img.podman.Logs(server.name))
	}
	if got, want := testimg.Digest(t, filepath.Join(server.data, "disk.img"), 4<<20), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img: sha256 %s, want the upload's %s", got, want)
	}
	if m := readTermination(t, server.termLog); m.Message != "Upload Complete" {
		t.Errorf("termination message %+v, want Upload Complete", m)
	}
}

// TestClonerToUploadServerBlock is the storage-class migration between two
// machines' worth of loop devices: the cloner pod (VOLUME_MODE=block) on
// the source device, the upload-server pod on a target device of exactly
// its size, both started as CDI starts them, our sparse-v2 stream between
// them with mutual TLS, verified.
func TestClonerToUploadServerBlock(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "source.raw", 8<<20, 47)
	src := testimg.LoopDevice(t, dir, 8<<20)
	testimg.WriteDevice(t, src, raw)
	dst := testimg.LoopDevice(t, dir, 8<<20)
	ca := testpki.NewCA(t, t.TempDir(), "cdi")
	server := startUploadServer(t, img, ca, dir, dst)
	waitHealthy(t, img.podman, server.name, mtlsClient(t, ca, nil), server.url+"/healthz")
	if err := os.Mkdir(filepath.Join(dir, "cloner"), 0o755); err != nil {
		t.Fatal(err)
	}
	clonerLog := terminationLog(t, filepath.Join(dir, "cloner"))
	c := clonerPod(img, ca, server, clonerLog, "VOLUME_MODE=block", "MOUNT_POINT=/dev/cdi-block-volume")
	c.Devices = []string{src + ":/dev/cdi-block-volume"}
	c.User, c.Groups = "0:0", []string{"107"}
	cloner := img.podman.Start(c)
	if code := img.podman.Wait(cloner); code != 0 {
		t.Fatalf("cloner exited %d\n%s\nupload server:\n%s", code, img.podman.Logs(cloner), img.podman.Logs(server.name))
	}
	if code := img.podman.Wait(server.name); code != 0 {
		t.Fatalf("upload server exited %d\n%s", code, img.podman.Logs(server.name))
	}
	if got, want := testimg.Digest(t, dst, -1), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("target device: sha256 %s, want the source's %s", got, want)
	}
	m := readTermination(t, server.termLog)
	if m.Message != "Clone Complete" {
		t.Errorf("upload server's termination message %+v, want Clone Complete", m)
	}
	if logs := img.podman.Logs(cloner); !strings.Contains(logs, "protocol=sparse-v2") {
		t.Errorf("the cloner did not use sparse-v2:\n%s", logs)
	}
	if b, _ := os.ReadFile(server.termLog); !strings.Contains(string(b), `"verified":true`) {
		t.Errorf("the clone was not verified: %s", b)
	}
}
