package imagetest

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/diskimport/engine/internal/imagebuild"
	"github.com/diskimport/engine/internal/testkit/podmantest"
)

// imageDirEnv names the directory make image wrote to.
const imageDirEnv = "IMAGE_DIR"

// cdiUID is the user CDI runs its pods as, and the image's user.
const cdiUID = 107

// cdiArgs are the arguments CDI's controller gives the importer and
// upload-server containers (Args: ["-v=" + verbosity], no command; the
// cloner gets none).
var cdiArgs = []string{"-v=1"}

// builtImage is the image under test, loaded into podman.
type builtImage struct {
	podman  *podmantest.Podman
	id      string // what containers are started from
	dir     string // IMAGE_DIR
	summary imagebuild.Summary
}

// loadImage loads IMAGE_DIR/importer-image.tar into podman, or skips the
// test (fails it in CI) when there is no image or no podman.
func loadImage(t *testing.T) builtImage {
	t.Helper()
	dir := os.Getenv(imageDirEnv)
	if dir == "" {
		if os.Getenv(podmantest.RequireEnv) == "1" {
			t.Fatalf("%s is not set; make image-test sets it", imageDirEnv)
		}
		t.Skipf("%s is not set: run make image-test, which builds the image first", imageDirEnv)
	}
	data, err := os.ReadFile(filepath.Join(dir, "importer-image.json"))
	if err != nil {
		t.Fatalf("reading the build's summary (make image writes it): %v", err)
	}
	var s imagebuild.Summary
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	p := podmantest.New(t)
	id := p.Load(filepath.Join(dir, "importer-image.tar"), s.ConfigDigest)
	if "sha256:"+id != s.ConfigDigest {
		t.Fatalf("podman loaded image %s, the build says %s", id, s.ConfigDigest)
	}
	return builtImage{podman: p, id: id, dir: dir, summary: s}
}

// label reads one of the image's labels through podman.
func (b builtImage) label(t *testing.T, key string) string {
	t.Helper()
	return strings.TrimSpace(b.podman.Output("image", "inspect", "--format", "{{index .Labels \""+key+"\"}}", b.id))
}

// volumeDir makes a directory as kubelet prepares a filesystem volume
// for a pod with fsGroup 107: owned by that group, group-writable,
// setgid.
func volumeDir(t *testing.T, parent, name string) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, cdiUID, cdiUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o2775); err != nil {
		t.Fatal(err)
	}
	return d
}

// terminationLog makes the file kubelet binds at /dev/termination-log.
func terminationLog(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	return p
}

// terminationMessage is what CDI's controller reads from a successful
// importer pod's termination message, and a few fields of ours.
type terminationMessage struct {
	ScratchSpaceRequired *bool             `json:"scratchSpaceRequired"`
	PreallocationApplied *bool             `json:"preallocationApplied"`
	Message              string            `json:"message"`
	SourceFormat         string            `json:"sourceFormat"`
	Compression          string            `json:"compression"`
	ScratchUsed          bool              `json:"scratchUsed"`
	Labels               map[string]string `json:"labels"`
}

// readTermination decodes the JSON termination message of a successful
// run.
func readTermination(t *testing.T, p string) terminationMessage {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 4096 {
		t.Errorf("termination message is %d bytes, Kubernetes keeps 4096", len(data))
	}
	var m terminationMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("termination message %q: %v", data, err)
	}
	if m.ScratchSpaceRequired == nil || m.PreallocationApplied == nil {
		t.Errorf("termination message %s lacks CDI's scratchSpaceRequired or preallocationApplied", data)
	}
	return m
}

// freeLocalAddr is a 127.0.0.1 address nothing listens on, for a server
// in a container on the host's network (another test may use :8443).
func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
