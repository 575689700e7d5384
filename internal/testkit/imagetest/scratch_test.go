package imagetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestScratchHandshake is CDI's scratch handshake with the image started
// as CDI's controller starts an importer pod (its entrypoint, -v=1, CDI's
// env, user 107 with the fsGroup, no capabilities, a writable root as
// CDI's pods have) on an HTTP monolithicSparse vmdk inside zstd, which
// needs scratch space. The image's own /scratch is a directory, not a
// mount point: without a scratch volume the pod writes nothing and exits
// 0 asking for scratch space (it used to fill that directory, the node's
// ephemeral storage); with one mounted it completes, byte for byte.
func TestScratchHandshake(t *testing.T) {
	img := loadImage(t)
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	served := filepath.Join(dir, "served")
	if err := os.Mkdir(served, 0o755); err != nil {
		t.Fatal(err)
	}
	raw := testimg.Raw(t, dir, "disk.raw", diskSize, 17)
	vmdk := testimg.Convert(t, raw, filepath.Join(served, "disk.vmdk"), "vmdk", "subformat=monolithicSparse")
	testimg.Compress(t, vmdk, "zst")
	url := testimg.Serve(t, served) + "disk.vmdk.zst"

	probe := img.podman.Run(podmantest.Container{
		Image: img.id, Entrypoint: "/bin/sh", CapDropAll: true,
		Args: []string{"-c", `test -d /scratch && echo "scratch is a directory"; grep -c " /scratch " /proc/self/mountinfo`},
	}, quickTimeout)
	if !strings.Contains(probe.Stdout, "scratch is a directory\n0\n") {
		t.Fatalf("the image's /scratch should be a directory that is no mount point:\n%s%s", probe.Stdout, probe.Stderr)
	}

	run := func(t *testing.T, scratch string) (podmantest.Result, string, terminationMessage) {
		data := volumeDir(t, t.TempDir(), "data")
		termLog := terminationLog(t, t.TempDir())
		c := podmantest.Container{
			Image:      img.id,
			Args:       cdiArgs,
			Env:        controllerEnv(t, url),
			Volumes:    []string{data + ":/data", termLog + ":/dev/termination-log"},
			Groups:     []string{"107"},
			HostNet:    true,
			CapDropAll: true,
		}
		if scratch != "" {
			c.Volumes = append(c.Volumes, scratch+":/scratch")
		}
		r := img.podman.Run(c, importTimeout)
		if r.ExitCode != 0 {
			t.Fatalf("importer exited %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
		}
		if first, _, _ := strings.Cut(r.Stderr, "\n"); !strings.Contains(first, `msg="Running as CDI's importer pod" role=importer`) {
			t.Errorf("first log line %q does not name the importer role", first)
		}
		return r, data, readTermination(t, termLog)
	}

	t.Run("no scratch volume", func(t *testing.T) {
		r, data, m := run(t, "")
		if !*m.ScratchSpaceRequired {
			t.Errorf("termination message %+v, want scratchSpaceRequired: /scratch is no mount point\n%s", m, r.Stderr)
		}
		if !strings.Contains(r.Stderr, "No scratch volume mounted at /scratch") {
			t.Errorf("the log does not say that no scratch volume is mounted:\n%s", r.Stderr)
		}
		assertEmpty(t, data)
	})
	t.Run("scratch volume mounted", func(t *testing.T) {
		scratch := volumeDir(t, t.TempDir(), "scratch")
		r, data, m := run(t, scratch)
		if m.Message != "Import Complete" || *m.ScratchSpaceRequired || !m.ScratchUsed || m.SourceFormat != "vmdk" || m.Compression != "zst" {
			t.Errorf("termination message %+v, want Import Complete of a vmdk.zst through scratch\n%s", m, r.Stderr)
		}
		if got, want := testimg.Digest(t, filepath.Join(data, "disk.img"), diskSize), testimg.Digest(t, raw, -1); got != want {
			t.Errorf("disk.img's first %d bytes: sha256 %s, want the source's %s", diskSize, got, want)
		}
		assertEmpty(t, scratch)
	})
}
