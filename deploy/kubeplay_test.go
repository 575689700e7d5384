package deploy_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/diskimport/engine/internal/testkit/podmantest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

const (
	playDiskSize   = 8 << 20
	playVolumeSize = "16Mi"
	playTimeout    = 3 * time.Minute
)

// TestFilesystemJobWithKubePlay runs the filesystem Job's pod spec with
// `podman kube play` against the image make image built: its claims
// become podman volumes, its security context (user 107, no
// capabilities, read-only root) applies, and the qcow2.xz imported from
// a server on the host lands in the data volume byte for byte. For the
// run, the pod spec gets the test's URL (the host as podman's pod network
// sees it, host.containers.internal) and size, a literal OWNER_UID (kube
// play has no metadata.uid), restartPolicy Never, and the file kubelet
// would bind at terminationMessagePath (kube play does not); everything
// else is the manifest's.
func TestFilesystemJobWithKubePlay(t *testing.T) {
	p := loadBuiltImage(t)
	testimg.Need(t, "qemu-img", "xz")
	dir := t.TempDir()
	served := filepath.Join(dir, "served")
	if err := os.Mkdir(served, 0o755); err != nil {
		t.Fatal(err)
	}
	raw := testimg.Raw(t, dir, "disk.raw", playDiskSize, 41)
	testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(served, "disk.qcow2"), "qcow2"), "xz")
	url := serveToPods(t, served) + "disk.qcow2.xz"

	m := readManifests(t, "importer-filesystem.yaml")
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	termLog := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(termLog, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(termLog, 0o666); err != nil {
		t.Fatal(err)
	}
	pod, claims := playablePod(t, m, suffix, url, termLog)
	play := filepath.Join(dir, "play.yaml")
	writeDocuments(t, play, append(claims, pod)...)

	cleanupPlay(t, p, play, claims)
	p.Output("kube", "play", play)
	container := pod.(*corev1.Pod).Name + "-" + pod.(*corev1.Pod).Spec.Containers[0].Name
	code := p.WaitWithin(container, playTimeout)
	if code != 0 {
		t.Fatalf("the importer exited %d\n%s", code, p.Logs(container))
	}
	dataVolume := claims[0].(*corev1.PersistentVolumeClaim).Name
	mountpoint := strings.TrimSpace(p.Output("volume", "inspect", "--format", "{{.Mountpoint}}", dataVolume))
	disk := filepath.Join(mountpoint, "disk.img")
	if got, want := testimg.Digest(t, disk, playDiskSize), testimg.Digest(t, raw, -1); got != want {
		t.Errorf("disk.img in volume %s: sha256 %s, want the source's %s", dataVolume, got, want)
	}
	testimg.AssertZeros(t, disk, playDiskSize, 8<<20)
	msg, err := os.ReadFile(termLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg), `"message":"Import Complete"`) {
		t.Errorf("termination message %s, want Import Complete", msg)
	}
}

// playablePod turns the manifest's Job into a Pod and its claims for
// kube play (see TestFilesystemJobWithKubePlay); the data claim is first.
func playablePod(t *testing.T, m *manifests, suffix, url, termLog string) (any, []any) {
	t.Helper()
	if len(m.jobs) != 1 {
		t.Fatalf("%s: want one Job", m.file)
	}
	spec := m.jobs[0].Spec.Template.Spec.DeepCopy()
	spec.RestartPolicy = corev1.RestartPolicyNever
	c := &spec.Containers[0]
	// kube play publishes a containerPort on the host's same port: the
	// metrics port (CDI's 8443) would be a fixed host port another
	// process may hold, and the test reads no metric.
	c.Ports = nil
	c.Env = setEnv(c.Env,
		"IMPORTER_ENDPOINT", url,
		"IMPORTER_IMAGE_SIZE", playVolumeSize,
		"FILESYSTEM_OVERHEAD", "0",
		"OWNER_UID", "kube-play-"+suffix)
	file := corev1.HostPathFile
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "kubelet-termination-log",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: termLog, Type: &file}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "kubelet-termination-log", MountPath: c.TerminationMessagePath})
	var claims []any
	dataFirst := func(mounts []corev1.VolumeMount) []string {
		var names []string
		for _, vm := range mounts {
			if vm.MountPath == dataDir {
				names = append([]string{vm.Name}, names...)
			} else {
				names = append(names, vm.Name)
			}
		}
		return names
	}
	for _, volumeName := range dataFirst(c.VolumeMounts) {
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			if v.Name != volumeName || v.PersistentVolumeClaim == nil {
				continue
			}
			claim := m.claims[v.PersistentVolumeClaim.ClaimName].DeepCopy()
			claim.Name = claim.Name + "-" + suffix
			claim.Spec.Resources.Requests = nil // a podman volume has no size
			v.PersistentVolumeClaim.ClaimName = claim.Name
			claims = append(claims, claim)
		}
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "kubeplay-" + suffix, Labels: m.jobs[0].Spec.Template.Labels},
		Spec:       *spec,
	}
	for _, cl := range claims {
		cl.(*corev1.PersistentVolumeClaim).TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"}
	}
	return pod, claims
}

// setEnv sets NAME, VALUE pairs in env, replacing a value or valueFrom.
func setEnv(env []corev1.EnvVar, pairs ...string) []corev1.EnvVar {
	out := append([]corev1.EnvVar{}, env...)
	for i := 0; i+1 < len(pairs); i += 2 {
		replaced := false
		for j := range out {
			if out[j].Name == pairs[i] {
				out[j] = corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]}
				replaced = true
			}
		}
		if !replaced {
			out = append(out, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
		}
	}
	return out
}

func writeDocuments(t *testing.T, file string, objs ...any) {
	t.Helper()
	var docs []string
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cleanupPlay takes the pod down and removes its volumes when the test
// ends, whatever happened.
func cleanupPlay(t *testing.T, p *podmantest.Podman, play string, claims []any) {
	t.Cleanup(func() {
		if _, err := p.Try("kube", "down", play); err != nil {
			t.Logf("podman kube down: %v", err)
		}
		for _, c := range claims {
			name := c.(*corev1.PersistentVolumeClaim).Name
			if out, err := p.Try("volume", "rm", "--force", name); err != nil {
				t.Errorf("removing volume %s: %v\n%s", name, err, out)
			}
		}
	})
}

// loadBuiltImage loads the archive make image wrote to IMAGE_DIR, so the
// manifests' image name is this build.
func loadBuiltImage(t *testing.T) *podmantest.Podman {
	t.Helper()
	dir := os.Getenv("IMAGE_DIR")
	if dir == "" {
		if os.Getenv(podmantest.RequireEnv) == "1" {
			t.Fatal("IMAGE_DIR is not set; make image-test sets it")
		}
		t.Skip("IMAGE_DIR is not set: run make image-test, which builds the image first")
	}
	p := podmantest.New(t)
	p.Load(filepath.Join(dir, "importer-image.tar"), image)
	return p
}

// serveToPods serves dir on every interface of the host, so that a pod on
// podman's bridge network reaches it as host.containers.internal, and
// returns that base URL (ending in /).
func serveToPods(t *testing.T, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.FileServer(http.Dir(dir)))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return fmt.Sprintf("http://host.containers.internal:%d/", l.Addr().(*net.TCPAddr).Port)
}
