package imagetest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/imagebuild"
	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// maxCompressedSize is the budget for the image (CDI's importer
// binary alone is 92 MB).
const maxCompressedSize = 40_000_000

const quickTimeout = time.Minute

// TestVersion runs `importer --version` and `importer version` in the
// image: the stamped version and commit match the image's labels, and
// qemu-img runs there (every library it links is in the image).
func TestVersion(t *testing.T) {
	img := loadImage(t)
	version, revision := img.label(t, imagebuild.LabelVersion), img.label(t, imagebuild.LabelRevision)
	if version == "" || revision == "" {
		t.Fatalf("labels: version %q, revision %q", version, revision)
	}
	if src := img.label(t, imagebuild.LabelSource); !strings.HasPrefix(src, "https://") {
		t.Errorf("label %s = %q", imagebuild.LabelSource, src)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := img.podman.Run(podmantest.Container{Image: img.id, Args: args, CapDropAll: true}, quickTimeout)
		if r.ExitCode != 0 {
			t.Fatalf("importer %s exited %d: %s", args[0], r.ExitCode, r.Stderr)
		}
		for _, want := range []string{"importer " + version + "\n", "commit   " + revision + "\n", "go       go1.", "qemu-img 7."} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("importer %s printed\n%s\nwant a line with %q", args[0], r.Stdout, want)
			}
		}
	}
}

// TestUserAndShell checks what CDI's pods rely on besides the importer:
// the image runs as 107, and sh and cp work (the node-pull init container
// runs `sh -c "cp ..."`); /tmp is writable; the real xz and igzip run
// (busybox's sh would prefer its own xz applet, hence the full path).
func TestUserAndShell(t *testing.T) {
	img := loadImage(t)
	r := img.podman.Run(podmantest.Container{
		Image:      img.id,
		Entrypoint: "/bin/sh",
		Args:       []string{"-c", `echo "uid=$(id -u)"; cp /usr/bin/importer /tmp/copy && echo copied; /usr/bin/xz --version; /usr/bin/igzip -V`},
		CapDropAll: true,
	}, quickTimeout)
	if r.ExitCode != 0 {
		t.Fatalf("sh exited %d: %s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "uid=107\n") {
		t.Errorf("the container runs as\n%s\nwant uid=107", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "copied") {
		t.Errorf("cp into /tmp as the image's user failed:\n%s%s", r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "xz (XZ Utils)") {
		t.Errorf("xz did not run:\n%s%s", r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "igzip command line interface") {
		t.Errorf("igzip did not run:\n%s%s", r.Stdout, r.Stderr)
	}
	user := strings.TrimSpace(img.podman.Output("image", "inspect", "--format", "{{.Config.User}}", img.id))
	if user != "107:107" {
		t.Errorf("image user %q, want 107:107", user)
	}
}

// TestCompressedSize states the image's size against its budget.
func TestCompressedSize(t *testing.T) {
	img := loadImage(t)
	t.Logf("image %s: %d bytes compressed (%.1f MB; layers %v), budget %d", img.summary.Digest, img.summary.CompressedSize,
		float64(img.summary.CompressedSize)/1e6, img.summary.LayerSizes, maxCompressedSize)
	if img.summary.CompressedSize > maxCompressedSize {
		t.Errorf("the image is %d bytes compressed, over the budget of %d", img.summary.CompressedSize, maxCompressedSize)
	}
}

// TestOCILayout reads the OCI layout make image wrote as podman reads
// one (skopeo and crane read it the same way): it is the same image.
func TestOCILayout(t *testing.T) {
	img := loadImage(t)
	layout := filepath.Join(img.dir, "importer-image-oci")
	for _, tag := range []string{"latest", img.label(t, imagebuild.LabelVersion)} {
		id := strings.TrimSpace(img.podman.Output("pull", "--quiet", "oci:"+layout+":"+tag))
		// podman names the pulled image after the layout's path (tag latest).
		name := "localhost" + layout
		if out, err := img.podman.Try("untag", id, name); err != nil {
			t.Logf("untagging %s: %v\n%s", name, err, out)
		}
		if id != img.id {
			t.Errorf("oci:%s:%s is image %s, the docker-archive %s", layout, tag, id, img.id)
		}
	}
}

// TestReproducible builds the image again with make, from the same
// commit (version, commit and time taken from the first build), into
// another directory: the digest and the docker-archive's bytes are the
// same.
func TestReproducible(t *testing.T) {
	img := loadImage(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	created := strings.TrimSpace(img.podman.Output("image", "inspect", "--format", "{{.Created.Unix}}", img.id))
	second := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "image",
		"IMAGE_DIR="+second,
		"VERSION="+img.label(t, imagebuild.LabelVersion),
		"COMMIT="+img.label(t, imagebuild.LabelRevision),
		"SOURCE_DATE_EPOCH="+created)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("second make image: %v\n%s", err, out)
	}
	var again imagebuild.Summary
	data, err := os.ReadFile(filepath.Join(second, "importer-image.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &again); err != nil {
		t.Fatal(err)
	}
	if again.Digest != img.summary.Digest {
		t.Fatalf("two builds of one commit: digests %s and %s\n%s", img.summary.Digest, again.Digest, out)
	}
	first, rebuilt := testimg.Digest(t, filepath.Join(img.dir, "importer-image.tar"), -1), testimg.Digest(t, filepath.Join(second, "importer-image.tar"), -1)
	if first != rebuilt {
		t.Errorf("two builds of one commit: docker-archives differ (sha256 %s and %s)", first, rebuilt)
	}
	t.Logf("rebuilt: digest %s, docker-archive sha256 %s", again.Digest, rebuilt)
}

// TestCDILaunchers runs each CDI role by the program name CDI's own images
// use: every launcher reaches the importer's matching command.
func TestCDILaunchers(t *testing.T) {
	img := loadImage(t)
	for launcher, want := range map[string]string{
		"/usr/bin/cdi-importer":      "Import a VM disk image",
		"/usr/bin/cdi-uploadserver":  "Serve CDI's upload paths",
		"/usr/bin/cloner_startup.sh": "importer clone-source [flags]",
		"/usr/bin/cdi-cloner":        "importer clone-source [flags]",
		sizeDetectionPath:            "Usage of cdi-image-size-detection",
		pollerPath:                   "Usage of cdi-source-update-poller",
	} {
		t.Run(filepath.Base(launcher), func(t *testing.T) {
			r := img.podman.Run(podmantest.Container{Image: img.id, Entrypoint: launcher, Args: []string{"--help"}, CapDropAll: true}, quickTimeout)
			if r.ExitCode != 0 {
				t.Fatalf("%s --help exited %d: %s%s", launcher, r.ExitCode, r.Stdout, r.Stderr)
			}
			if out := r.Stdout + r.Stderr; !strings.Contains(out, want) {
				t.Errorf("%s --help printed\n%s\nwant %q", launcher, out, want)
			}
		})
	}
}
