package imagetest

import (
	"bytes"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/diskimport/engine/internal/imagebuild"
	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// containerImageServer is where the image holds CDI's node-pull server.
const containerImageServer = "/usr/bin/cdi-containerimage-server"

// TestNodePull runs registry node pull as CDI's controller lays the pod
// out, in one pod (shared network) with a shared volume: an init
// container from our image copies the server program out with sh and cp;
// the containerdisk image (no shell, no libc) runs it to serve /disk; the
// importer waits for the ready file, imports over http://localhost:8100,
// and creates the done file, on which the server exits.
func TestNodePull(t *testing.T) {
	img := loadImage(t)
	probe := img.podman.Run(podmantest.Container{Image: img.id, Entrypoint: "/bin/sh", Args: []string{"-c", "test -x " + containerImageServer}}, quickTimeout)
	if probe.ExitCode != 0 {
		t.Skip("issue 11: cdi-containerimage-server is not built yet (make build writes no bin/cdi-containerimage-server), so the image has no " + containerImageServer)
	}
	dir := t.TempDir()
	raw, qcow2 := testimg.RawAndQCOW2(t, dir, diskSize, 31)
	diskImage := loadContainerDisk(t, img.podman, dir, qcow2)
	shared, data := volumeDir(t, dir, "shared"), volumeDir(t, dir, "data")
	termLog := terminationLog(t, dir)
	pod := img.podman.Pod(false)

	initRun := img.podman.Run(podmantest.Container{
		Image: img.id, Pod: pod, Entrypoint: "/bin/sh",
		Args:    []string{"-c", "cp " + containerImageServer + " /shared/server"},
		Volumes: []string{shared + ":/shared"}, CapDropAll: true,
	}, quickTimeout)
	if initRun.ExitCode != 0 {
		t.Fatalf("init container exited %d: %s%s", initRun.ExitCode, initRun.Stdout, initRun.Stderr)
	}
	server := img.podman.Start(podmantest.Container{
		Image: diskImage, Pod: pod, Entrypoint: "/shared/server",
		Args:    []string{"-p", "8100", "-image-dir", "/disk", "-ready-file", "/shared/ready", "-done-file", "/shared/done"},
		Volumes: []string{shared + ":/shared"}, User: "107:107", CapDropAll: true,
		Env: []string{"KUBEVIRT_IO_TEST_LABEL=from-containerdisk"},
	})
	r := img.podman.Run(podmantest.Container{
		Image: img.id, Pod: pod,
		Env: withEnv(controllerEnv(t, "http://localhost:8100/disk.img"),
			"IMPORTER_PULL_METHOD=node", "IMPORTER_READY_FILE=/shared/ready", "IMPORTER_DONE_FILE=/shared/done",
			"IMPORTER_METRICS_LISTEN=:8443"),
		Volumes:    []string{shared + ":/shared", data + ":/data", termLog + ":/dev/termination-log"},
		CapDropAll: true,
	}, importTimeout)
	if r.ExitCode != 0 {
		t.Fatalf("importer exited %d\n%s%s\nserver:\n%s", r.ExitCode, r.Stdout, r.Stderr, img.podman.Logs(server))
	}
	if code := img.podman.WaitWithin(server, time.Minute); code != 0 {
		t.Errorf("the server exited %d after the done file\n%s", code, img.podman.Logs(server))
	}
	if got, want := testimg.Digest(t, filepath.Join(data, "disk.img"), diskSize), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img: sha256 %s, want the containerdisk's %s", got, want)
	}
	m := readTermination(t, termLog)
	if m.Message != "Import Complete" {
		t.Errorf("termination message %+v", m)
	}
	if !slices.Contains(slices.Collect(maps.Values(m.Labels)), "from-containerdisk") {
		t.Errorf("labels %v lack the containerdisk's KUBEVIRT_IO_TEST_LABEL (from the server's /info)", m.Labels)
	}
}

// loadContainerDisk builds a containerdisk image as KubeVirt's are made
// (one layer: /disk/disk.img owned by 107, nothing else: no shell, no
// libc) and loads it into podman.
func loadContainerDisk(t *testing.T, p *podmantest.Podman, dir, disk string) string {
	t.Helper()
	tree := imagebuild.NewTree()
	if err := tree.Dir("/disk", 0o555, cdiUID, cdiUID); err != nil {
		t.Fatal(err)
	}
	if err := tree.Add(imagebuild.Entry{Path: "/disk/disk.img", Kind: imagebuild.KindFile, Perm: 0o444, UID: cdiUID, GID: cdiUID, Source: disk}); err != nil {
		t.Fatal(err)
	}
	layerTar, err := tree.Tar(time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	var img v1.Image = mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		t.Fatal(err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	archive := filepath.Join(dir, "containerdisk.tar")
	ref := "localhost/diskimport/imagetest-containerdisk:latest"
	if err := imagebuild.WriteDockerArchive(archive, img, []string{ref}, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	id := p.Load(archive, ref)
	t.Cleanup(func() {
		if out, err := p.Try("rmi", "--force", ref); err != nil {
			t.Logf("removing %s: %v\n%s", ref, err, out)
		}
	})
	return id
}
