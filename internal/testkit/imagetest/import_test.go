package imagetest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const (
	diskSize      = 8 << 20  // virtual size of the test disk
	volumeSize    = 16 << 20 // the PVC: bigger, so growing the image shows
	volumeSizeEnv = "16Mi"
	importTimeout = 3 * time.Minute
)

// servedQcow2XZ writes a raw test disk, serves its qcow2.xz on
// 127.0.0.1 and returns the raw file and the URL. A compressed qcow2 is
// the longest path: download, xz child, scratch, qemu-img.
func servedQcow2XZ(t *testing.T, dir string) (raw, url string) {
	t.Helper()
	testimg.Need(t, "qemu-img", "xz")
	served := filepath.Join(dir, "served")
	if err := os.Mkdir(served, 0o755); err != nil {
		t.Fatal(err)
	}
	raw = testimg.Raw(t, dir, "disk.raw", diskSize, 13)
	qcow2 := testimg.Convert(t, raw, filepath.Join(served, "disk.qcow2"), "qcow2")
	testimg.Compress(t, qcow2, "xz")
	return raw, testimg.Serve(t, served) + "disk.qcow2.xz"
}

// controllerEnv is the environment CDI's controller gives an importer pod
// for an http source (makeImporterContainerSpec), plus where our metric
// listens: the pod shares the host's network here, so not on :8443.
func controllerEnv(t *testing.T, url string) []string {
	return []string{
		"IMPORTER_SOURCE=http",
		"IMPORTER_ENDPOINT=" + url,
		"IMPORTER_CONTENTTYPE=kubevirt",
		"IMPORTER_IMAGE_SIZE=" + volumeSizeEnv,
		"OWNER_UID=8d1c4a1e-1b7e-4a8e-9b4e-imagetest",
		"FILESYSTEM_OVERHEAD=0",
		"INSECURE_TLS=false",
		"PREALLOCATION=false",
		"IMPORTER_METRICS_LISTEN=" + freeLocalAddr(t),
	}
}

// withEnv replaces or adds KEY=VALUE settings in env.
func withEnv(env []string, settings ...string) []string {
	out := slices.Clone(env)
	for _, s := range settings {
		key, _, _ := strings.Cut(s, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, key+"=") })
		out = append(out, s)
	}
	return out
}

// TestFilesystemVolume is an importer pod on a filesystem PVC with a
// scratch PVC, run as CDI runs it: user 107, no capabilities, /data and
// /scratch mounted, a termination log.
func TestFilesystemVolume(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	raw, url := servedQcow2XZ(t, dir)
	data, scratch := volumeDir(t, dir, "data"), volumeDir(t, dir, "scratch")
	termLog := terminationLog(t, dir)

	r := img.podman.Run(podmantest.Container{
		Image:      img.id,
		Args:       cdiArgs,
		Env:        controllerEnv(t, url),
		Volumes:    []string{data + ":/data", scratch + ":/scratch", termLog + ":/dev/termination-log"},
		HostNet:    true,
		CapDropAll: true,
		ReadOnly:   true,
	}, importTimeout)
	if r.ExitCode != 0 {
		t.Fatalf("importer exited %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
	}

	disk := filepath.Join(data, "disk.img")
	if got, want := testimg.Digest(t, disk, diskSize), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img's first %d bytes: sha256 %s, want the source's %s", diskSize, got, want)
	}
	info, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() != volumeSize {
		t.Errorf("disk.img is %d bytes, want the volume's %d", info.Size(), volumeSize)
	}
	testimg.AssertZeros(t, disk, diskSize, volumeSize-diskSize)
	if uid := fileOwner(info); uid != cdiUID {
		t.Errorf("disk.img is owned by uid %d, want %d (the image's user)", uid, cdiUID)
	}
	assertEmpty(t, scratch)

	m := readTermination(t, termLog)
	// A qcow2.xz stream is decoded straight onto the volume: the scratch
	// PVC stays unused.
	if m.Message != "Import Complete" || *m.ScratchSpaceRequired || m.SourceFormat != "qcow2" || m.Compression != "xz" || m.ScratchUsed {
		t.Errorf("termination message %+v, want Import Complete of a qcow2.xz decoded without scratch", m)
	}
}

// TestBlockVolume is an importer pod on a block PVC: a loop device at
// /dev/cdi-block-volume, root without capabilities (the device node is
// root's), fsGroup 107 for the scratch volume the compressed qcow2 needs.
func TestBlockVolume(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	raw, url := servedQcow2XZ(t, dir)
	dev := testimg.LoopDevice(t, dir, volumeSize)
	scratch := volumeDir(t, dir, "scratch")
	termLog := terminationLog(t, dir)

	r := img.podman.Run(podmantest.Container{
		Image:      img.id,
		Args:       cdiArgs,
		Env:        controllerEnv(t, url),
		Volumes:    []string{scratch + ":/scratch", termLog + ":/dev/termination-log"},
		Devices:    []string{dev + ":/dev/cdi-block-volume"},
		User:       "0:0",
		Groups:     []string{"107"},
		HostNet:    true,
		CapDropAll: true,
		ReadOnly:   true,
	}, importTimeout)
	if r.ExitCode != 0 {
		t.Fatalf("importer exited %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	if got, want := testimg.Digest(t, dev, diskSize), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("%s's first %d bytes: sha256 %s, want the source's %s", dev, diskSize, got, want)
	}
	assertEmpty(t, scratch)
	m := readTermination(t, termLog)
	if m.Message != "Import Complete" || *m.ScratchSpaceRequired || m.SourceFormat != "qcow2" {
		t.Errorf("termination message %+v, want Import Complete of a qcow2", m)
	}
}

// assertEmpty checks that the importer cleaned its scratch space.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	if names := testimg.DirNames(t, dir); len(names) > 0 {
		t.Errorf("%s still holds %s after the import", dir, strings.Join(names, ", "))
	}
}
