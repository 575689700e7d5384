package imagetest

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/diskimport/engine/internal/testkit/kubeapitest"
	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/regtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// The programs CDI's controller starts from the importer image by path,
// and the mount points its pod specs give them (CDI's constants).
const (
	sizeDetectionPath = "/usr/bin/cdi-image-size-detection"
	pollerPath        = "/usr/bin/cdi-source-update-poller"
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	pollerCertDir     = "/certs" // common.ImporterCertDir, the cron's certConfigMap
)

// sizeDetectionPod is the pod CDI's clone controller makes
// (pvc-clone-controller.go makeSizeDetectionPodSpec): the program as the
// container's command, "-image-path /data/disk.img", the source volume at
// /data, the restricted security context (user 107, fsGroup 107, all
// capabilities dropped).
func sizeDetectionPod(img builtImage, source, termLog string, args ...string) podmantest.Container {
	if args == nil {
		args = []string{"-image-path", "/data/disk.img"}
	}
	return podmantest.Container{
		Image: img.id, Entrypoint: sizeDetectionPath, Args: args,
		Volumes: []string{source + ":/data", termLog + ":/dev/termination-log"},
		User:    "107:107", Groups: []string{"107"}, CapDropAll: true,
	}
}

// TestSizeDetectionPod runs the image as CDI's size-detection pod on
// source volumes holding a raw, a qcow2 and a hostile disk.img: the
// termination message is qemu-img's virtual size, or exit 2 with the cause.
func TestSizeDetectionPod(t *testing.T) {
	img := loadImage(t)
	dir := t.TempDir()
	raw, qcow2 := testimg.RawAndQCOW2(t, dir, diskSize, 41)
	sparse := filepath.Join(dir, "sparse.qcow2")
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", sparse, "20G")
	good, err := os.ReadFile(qcow2)
	if err != nil {
		t.Fatal(err)
	}
	backing := bytes.Clone(good)
	copy(backing[0x1000:], "/etc/passwd")
	binary.BigEndian.PutUint64(backing[8:], 0x1000)
	binary.BigEndian.PutUint32(backing[16:], uint32(len("/etc/passwd")))
	backingPath := filepath.Join(dir, "backing.qcow2")
	if err := os.WriteFile(backingPath, backing, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, disk string
		code       int
		want       string
	}{
		{"raw", raw, 0, strconv.Itoa(diskSize)},
		{"qcow2", qcow2, 0, strconv.Itoa(diskSize)},
		{"sparse qcow2 of 20 GiB", sparse, 0, strconv.FormatInt(20<<30, 10)},
		{"qcow2 with a backing file", backingPath, 2, "backing file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vol := volumeDir(t, t.TempDir(), "source")
			testimg.Run(t, "cp", "--sparse=always", c.disk, filepath.Join(vol, "disk.img"))
			if err := os.Chown(filepath.Join(vol, "disk.img"), cdiUID, cdiUID); err != nil {
				t.Fatal(err)
			}
			termLog := terminationLog(t, t.TempDir())
			r := img.podman.Run(sizeDetectionPod(img, vol, termLog), quickTimeout)
			msg, _ := os.ReadFile(termLog)
			if r.ExitCode != c.code {
				t.Fatalf("exited %d, want %d; termination message %q\n%s%s", r.ExitCode, c.code, msg, r.Stdout, r.Stderr)
			}
			if c.code == 0 && string(msg) != c.want || c.code != 0 && !strings.Contains(string(msg), c.want) {
				t.Errorf("termination message %q, want %q", msg, c.want)
			}
		})
	}
	t.Run("CDI's exit codes on bad arguments", func(t *testing.T) {
		vol := volumeDir(t, t.TempDir(), "source")
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{}, 1, "-image-path is required"},
			{[]string{"-image-path", "/data/disk.img", "-bogus"}, 2, "flag provided but not defined: -bogus"},
			{[]string{"-image-path", "data/disk.img"}, 3, "absolute path"},
			{[]string{"-image-path", "/data/disk.img"}, 2, "no such file"},
		} {
			r := img.podman.Run(sizeDetectionPod(img, vol, terminationLog(t, t.TempDir()), c.args...), quickTimeout)
			if r.ExitCode != c.code || !strings.Contains(r.Stdout+r.Stderr, c.want) {
				t.Errorf("%v: exited %d, want %d and %q in\n%s%s", c.args, r.ExitCode, c.code, c.want, r.Stdout, r.Stderr)
			}
		}
	})
}

// pollerPod is the CronJob's pod CDI's DataImportCron controller makes
// (dataimportcron-controller.go InitPollerPod): the program and its flags
// as the command, the image's user with all capabilities dropped, the
// service account's token and CA where the kubelet mounts them and
// KUBERNETES_SERVICE_HOST/_PORT, here on the host's network to reach the
// API server and registry on 127.0.0.1.
func pollerPod(t *testing.T, img builtImage, api *kubeapitest.Server, termLog string, env []string, volumes []string, args ...string) podmantest.Container {
	sa := filepath.Join(t.TempDir(), "serviceaccount")
	if err := os.Mkdir(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"token": []byte(api.Token), "ca.crt": api.CAPEM, "namespace": []byte("cdi")} {
		if err := os.WriteFile(filepath.Join(sa, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return podmantest.Container{
		Image: img.id, Entrypoint: pollerPath, Args: args,
		Env:        append([]string{"KUBERNETES_SERVICE_HOST=" + api.Host, "KUBERNETES_SERVICE_PORT=" + api.Port}, env...),
		Volumes:    append([]string{sa + ":" + serviceAccountDir + ":ro", termLog + ":/dev/termination-log"}, volumes...),
		HostNet:    true,
		CapDropAll: true,
	}
}

// TestPollerPod runs the image as CDI's poller pod against a registry and
// a stand-in API server on 127.0.0.1: the DataImportCron gets the
// manifest digest, a new push is picked up by the next poll, and a TLS
// registry with the cron's secret and certConfigMap works.
func TestPollerPod(t *testing.T) {
	img := loadImage(t)
	digestOf := func(t *testing.T, reg *regtest.Registry, repo string, b byte) string {
		i := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Gzip, regtest.File{Name: "disk/", Dir: true}, regtest.File{Name: "disk/disk.img", Data: bytes.Repeat([]byte{b}, 4096)}))
		reg.Push(t, repo, i, nil)
		d, err := i.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	const ann = "cdi.kubevirt.io/storage.import.sourceDesiredDigest"

	t.Run("plain HTTP registry, INSECURE_TLS, two digests", func(t *testing.T) {
		reg := regtest.Start(t, regtest.Options{})
		first := digestOf(t, reg, "golden/cd:latest", 1)
		api := kubeapitest.Start(t, "golden", "cron", map[string]string{})
		args := []string{"-ns", "golden", "-cron", "cron", "-url", "docker://" + reg.Host + "/golden/cd:latest"}
		poll := func() {
			termLog := terminationLog(t, t.TempDir())
			r := img.podman.Run(pollerPod(t, img, api, termLog, []string{"INSECURE_TLS=true"}, nil, args...), quickTimeout)
			if r.ExitCode != 0 {
				msg, _ := os.ReadFile(termLog)
				t.Fatalf("poller exited %d: %s\n%s%s", r.ExitCode, msg, r.Stdout, r.Stderr)
			}
		}
		poll()
		if got, _ := api.State(); got[ann] != first {
			t.Fatalf("annotations %v, want %s=%s", got, ann, first)
		}
		second := digestOf(t, reg, "golden/cd:latest", 2)
		poll()
		got, reqs := api.State()
		if got[ann] != second {
			t.Errorf("after a second push: annotations %v, want %s=%s", got, ann, second)
		}
		if len(reqs) != 4 || reqs[1].Method != "PATCH" || reqs[1].Authorization != "Bearer "+api.Token {
			t.Errorf("requests %+v, want GET and PATCH twice with the service account's token", reqs)
		}
	})

	t.Run("TLS registry with credentials and the cron's certConfigMap at /certs", func(t *testing.T) {
		reg := regtest.Start(t, regtest.Options{TLS: true, User: "puller", Pass: "s3cret"})
		want := digestOf(t, reg, "private/cd:v1", 3)
		api := kubeapitest.Start(t, "ns", "cron", nil)
		termLog := terminationLog(t, t.TempDir())
		r := img.podman.Run(pollerPod(t, img, api, termLog,
			[]string{"IMPORTER_ACCESS_KEY_ID=puller", "IMPORTER_SECRET_KEY=s3cret"},
			[]string{reg.CADir + ":" + pollerCertDir + ":ro"},
			"-ns", "ns", "-cron", "cron", "-url", "docker://"+reg.Host+"/private/cd:v1", "-certdir", pollerCertDir), quickTimeout)
		if r.ExitCode != 0 {
			msg, _ := os.ReadFile(termLog)
			t.Fatalf("poller exited %d: %s\n%s%s", r.ExitCode, msg, r.Stdout, r.Stderr)
		}
		if got, _ := api.State(); got[ann] != want {
			t.Errorf("annotations %v, want %s=%s", got, ann, want)
		}
	})

	t.Run("CDI's exit codes on bad arguments", func(t *testing.T) {
		api := kubeapitest.Start(t, "ns", "cron", nil)
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"-ns", "ns", "-cron", "cron"}, 1, "-url, -ns and -cron are required"},
			{[]string{"-ns", "ns", "-cron", "cron", "-url", "docker://127.0.0.1:1/x", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		} {
			r := img.podman.Run(pollerPod(t, img, api, terminationLog(t, t.TempDir()), nil, nil, c.args...), quickTimeout)
			if r.ExitCode != c.code || !strings.Contains(r.Stdout+r.Stderr, c.want) {
				t.Errorf("%v: exited %d, want %d and %q in\n%s%s", c.args, r.ExitCode, c.code, c.want, r.Stdout, r.Stderr)
			}
		}
	})
}

// TestContainerImageServerHelpExits0: a node-pull DataImportCron's poller
// pod runs the containerdisk with "/shared/server -h" (the server copied
// out of this image) and expects exit 0.
func TestContainerImageServerHelpExits0(t *testing.T) {
	img := loadImage(t)
	r := img.podman.Run(podmantest.Container{Image: img.id, Entrypoint: containerImageServer, Args: []string{"-h"}, CapDropAll: true}, quickTimeout)
	if r.ExitCode != 0 {
		t.Errorf("%s -h exited %d\n%s%s", containerImageServer, r.ExitCode, r.Stdout, r.Stderr)
	}
}
