package imagetest

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testpki"
)

const uploadToken = "imagetest-upload-token"

// TestUploadServer runs the image as an upload server pod
// (IMPORTER_SOURCE=upload: HTTPS with the certificate in TLS_CERT and
// TLS_KEY, a bearer token) on a filesystem volume, and uploads a qcow2.xz
// from the host as CDI's upload proxy would: the server imports it,
// writes the termination message and exits.
func TestUploadServer(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	raw, _ := servedQcow2XZ(t, dir)
	upload := filepath.Join(dir, "served", "disk.qcow2.xz")
	data, scratch := volumeDir(t, dir, "data"), volumeDir(t, dir, "scratch")
	termLog := terminationLog(t, dir)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(uploadToken+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, pool := serverCertificate(t)
	addr := freeLocalAddr(t)

	name := img.podman.Start(podmantest.Container{
		Image: img.id,
		Env: []string{
			"IMPORTER_SOURCE=upload",
			"IMPORTER_UPLOAD_LISTEN=" + addr,
			"IMPORTER_UPLOAD_TOKEN_FILE=/run/upload/token",
			"TLS_CERT=" + certPEM,
			"TLS_KEY=" + keyPEM,
			"IMPORTER_IMAGE_SIZE=" + volumeSizeEnv,
			"FILESYSTEM_OVERHEAD=0",
			"IMPORTER_METRICS_LISTEN=" + freeLocalAddr(t),
		},
		Volumes: []string{data + ":/data", scratch + ":/scratch", termLog + ":/dev/termination-log",
			token + ":/run/upload/token:ro"},
		HostNet:    true,
		CapDropAll: true,
		ReadOnly:   true,
	})
	client := &http.Client{Timeout: importTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	waitHealthy(t, img.podman, name, client, "https://"+addr+"/healthz")

	body, err := os.Open(upload)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	req, err := http.NewRequest(http.MethodPut, "https://"+addr+"/v1beta1/upload", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+uploadToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("upload: %v\n%s", err, img.podman.Logs(name))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload answered %s\n%s", resp.Status, img.podman.Logs(name))
	}
	if code := img.podman.Wait(name); code != 0 {
		t.Fatalf("upload server exited %d after the upload\n%s", code, img.podman.Logs(name))
	}
	if got, want := testimg.Digest(t, filepath.Join(data, "disk.img"), diskSize), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img: sha256 %s, want the upload's %s", got, want)
	}
	if m := readTermination(t, termLog); !strings.HasSuffix(m.Message, "Complete") || m.SourceFormat != "qcow2" {
		t.Errorf("termination message %+v, want a completed qcow2", m)
	}
}

// waitHealthy polls url until it answers 200, failing when the container
// ends first or a minute passes.
func waitHealthy(t *testing.T, p *podmantest.Podman, name string, client *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if state := strings.TrimSpace(p.Output("inspect", "--format", "{{.State.Status}}", name)); state == "exited" || time.Now().After(deadline) {
			t.Fatalf("%s never answered (%v; container %s)\n%s", url, err, state, p.Logs(name))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serverCertificate is a test CA's certificate for 127.0.0.1 and its key
// as PEM text, and a pool trusting the CA.
func serverCertificate(t *testing.T) (certPEM, keyPEM string, pool *x509.CertPool) {
	t.Helper()
	ca := testpki.NewCA(t, t.TempDir(), "imagetest")
	srv := ca.Server("upload")
	return string(srv.CertPEM), string(srv.KeyPEM), ca.Pool()
}
