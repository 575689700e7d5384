package imagetest

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/docblocks"
	"github.com/diskimport/engine/internal/testimg"
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
	blocks, err := docblocks.Named(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// $ENGINE/bin/importer-image.tar is where make image writes the archive.
	engine := t.TempDir()
	if err := os.Mkdir(filepath.Join(engine, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(img.dir, "importer-image.tar"), filepath.Join(engine, "bin", "importer-image.tar")); err != nil {
		t.Fatal(err)
	}
	env := []string{"ENGINE=" + engine}
	if out, err := docblocks.RunShell(t, blocks["image"], dir, env, 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	podman := blocks["podman"]
	if n := strings.Count(podman.Text, readmeExamplePort); n != 2 {
		t.Fatalf("the podman example names port %s %d times, want 2 (the server and the endpoint)", readmeExamplePort, n)
	}
	podman.Text = strings.ReplaceAll(podman.Text, readmeExamplePort, strconv.Itoa(freePort(t)))
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

// freePort returns a port of 127.0.0.1 the OS picked, free when it
// returns.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
