package imagetest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/testkit/docblocks"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// readmeExamplePort is the port README's podman example serves the image
// on; the test serves it on a port the OS picked instead.
const readmeExamplePort = "8080"

// README.md's third example, run as a reader pastes it after make image:
// the image loaded into podman, run as CDI's importer pod on a qcow2.xz
// that python3's http.server serves on 127.0.0.1; the volume's disk.img
// is compared with the image's bytes and the termination message read.
func TestREADMEImageExample(t *testing.T) {
	img := loadImage(t)
	testimg.Need(t, "qemu-img", "xz", "python3", "cmp")
	blocks, err := docblocks.Named(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{"ENGINE=" + engineWithImage(t, img)}
	if out, err := docblocks.RunShell(t, blocks["image"], dir, env, 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	podman := blocks["podman"]
	if n := strings.Count(podman.Text, readmeExamplePort); n != 2 {
		t.Fatalf("the podman example names port %s %d times, want 2 (the server and the endpoint)", readmeExamplePort, n)
	}
	podman.Text = strings.ReplaceAll(podman.Text, readmeExamplePort, freePort(t))
	out, err := docblocks.RunShell(t, podman, dir, env, importTimeout)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "data/disk.img holds the image") {
		t.Errorf("the example's cmp did not pass:\n%s", out)
	}
	var msg struct {
		Message      string `json:"message"`
		SourceFormat string `json:"sourceFormat"`
	}
	termLog, err := os.ReadFile(filepath.Join(dir, "termination-log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(termLog, &msg); err != nil || msg.Message != "Import Complete" || msg.SourceFormat != "qcow2" {
		t.Errorf("termination message %s (%v), want Import Complete of a qcow2", termLog, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "vm.raw"))
	if err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(filepath.Join(dir, "data", "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	if len(disk) < len(raw) || !bytes.Equal(raw, disk[:len(raw)]) {
		t.Errorf("data/disk.img (%d bytes) does not begin with vm.raw's %d bytes", len(disk), len(raw))
	}
}

// engineWithImage returns a directory that stands for the clone in the
// examples' $ENGINE: its bin/importer-image.tar, where make image writes
// the archive, is the image under test.
func engineWithImage(t *testing.T, img builtImage) string {
	t.Helper()
	engine := t.TempDir()
	if err := os.Mkdir(filepath.Join(engine, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(img.dir, "importer-image.tar"), filepath.Join(engine, "bin", "importer-image.tar")); err != nil {
		t.Fatal(err)
	}
	return engine
}

// freePort returns a port of 127.0.0.1 the OS picked, free when it
// returns, for an example's server.
func freePort(t *testing.T) string {
	t.Helper()
	_, port, _ := strings.Cut(freeLocalAddr(t), ":")
	return port
}

// docs/cdi.md's smoke test, run as an admin pastes it after make image: a
// qcow2.xz made with qemu-img, served by python3 on 127.0.0.1, imported
// by the image run as CDI's importer pod onto a loop device at
// /dev/cdi-block-volume; the device's bytes are compared and the
// termination message read.
func TestCDIDocSmokeTest(t *testing.T) {
	img := loadImage(t)
	testimg.Need(t, "qemu-img", "xz", "python3", "cmp", "losetup")
	blocks, err := docblocks.Named(filepath.Join("..", "..", "..", "docs", "cdi.md"))
	if err != nil {
		t.Fatal(err)
	}
	smoke := blocks["smoke-block"]
	if n := strings.Count(smoke.Text, readmeExamplePort); n != 2 {
		t.Fatalf("the smoke test names port %s %d times, want 2 (the server and the endpoint)", readmeExamplePort, n)
	}
	smoke.Text = strings.ReplaceAll(smoke.Text, readmeExamplePort, freePort(t))
	// The block runs the tag it loaded; the image under test is the one
	// this test loaded, whatever another run tagged latest since.
	smoke.Text = strings.ReplaceAll(smoke.Text, "localhost/diskimport/importer:latest", img.id)
	dir := t.TempDir()
	backing := filepath.Join(dir, "vm1-block.img")
	testimg.DetachLoopsWhenDone(t, backing)
	out, err := docblocks.RunShell(t, smoke, dir, []string{"ENGINE=" + engineWithImage(t, img)}, importTimeout)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"Running as CDI's importer pod", "holds the image"} {
		if !strings.Contains(out, want) {
			t.Errorf("the smoke test's output lacks %q:\n%s", want, out)
		}
	}
	var msg struct {
		Message      string `json:"message"`
		SourceFormat string `json:"sourceFormat"`
	}
	termLog, err := os.ReadFile(filepath.Join(dir, "termination-log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(termLog, &msg); err != nil || msg.Message != "Import Complete" || msg.SourceFormat != "qcow2" {
		t.Errorf("termination message %s (%v), want Import Complete of a qcow2", termLog, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "vm.raw"))
	if err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(backing)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, disk[:len(raw)]) {
		t.Errorf("the loop device's first %d bytes differ from vm.raw", len(raw))
	}
}
