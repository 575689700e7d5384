package deploy_test

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// image is what every manifest runs: the tag make image gives the
	// build (load it on the nodes, or retag it for your registry).
	image = "localhost/diskimport/importer:latest"
	// cdiUser is the non-root user of the image and of CDI's pods.
	cdiUser = 107
	// memoryLimit is the limit cmd/importer's TestImportInSmallMemoryCgroup
	// imports a 1 GiB disk under (a 256 MiB memory cgroup).
	memoryLimit = "256Mi"
	// CDI's fixed paths.
	dataDir      = "/data"
	scratchDir   = "/scratch"
	blockDevice  = "/dev/cdi-block-volume"
	terminationP = "/dev/termination-log"
)

// expectation is what one manifest file must hold.
type expectation struct {
	file     string
	source   string                                 // IMPORTER_SOURCE
	root     bool                                   // runs as uid 0 (block devices are root's)
	mounts   map[string]corev1.PersistentVolumeMode // mount path → mode of its claim ("" for a non-claim volume)
	devices  map[string]bool                        // device path → read-only claim
	services int
	// webIdentity: the pod's own ServiceAccount token is its S3
	// credential (what EKS's webhook injects): a projected token for the
	// STS at webIdentityDir, no Secret anywhere.
	webIdentity bool
}

// webIdentityDir is where EKS's pod identity webhook projects the token.
const webIdentityDir = "/var/run/secrets/eks.amazonaws.com/serviceaccount"

func expectations() []expectation {
	fs := corev1.PersistentVolumeFilesystem
	return []expectation{
		{file: "importer-filesystem.yaml", source: "http", mounts: map[string]corev1.PersistentVolumeMode{dataDir: fs, scratchDir: fs, "/tmp": ""}},
		{file: "importer-block.yaml", source: "http", root: true, mounts: map[string]corev1.PersistentVolumeMode{scratchDir: fs, "/tmp": ""},
			devices: map[string]bool{blockDevice: false}},
		{file: "upload-server.yaml", source: "upload", mounts: map[string]corev1.PersistentVolumeMode{dataDir: fs, scratchDir: "", "/tmp": "", "/var/run/secrets/upload": ""},
			services: 1},
		{file: "clone.yaml", source: "clone", root: true, mounts: map[string]corev1.PersistentVolumeMode{"/tmp": ""},
			devices: map[string]bool{"/dev/cdi-clone-source": true, blockDevice: false}},
		{file: "importer-s3-web-identity.yaml", source: "s3", mounts: map[string]corev1.PersistentVolumeMode{dataDir: fs, "/tmp": "", webIdentityDir: ""},
			webIdentity: true},
	}
}

// TestManifests decodes every deploy/*.yaml strictly and checks what
// matters for running our image under CDI's contract.
func TestManifests(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exps := expectations()
	if len(files) != len(exps) {
		t.Errorf("deploy/ has %v; the test knows %d files", files, len(exps))
	}
	envNames := envNamesInSource(t)
	all := map[string]*manifests{}
	for _, e := range exps {
		all[e.file] = readManifests(t, e.file)
	}
	for _, e := range exps {
		t.Run(e.file, func(t *testing.T) { checkManifest(t, e, all, envNames) })
	}
}

func checkManifest(t *testing.T, e expectation, all map[string]*manifests, envNames map[string]bool) {
	m := all[e.file]
	ws := m.workloads()
	if len(ws) != 1 {
		t.Fatalf("%d workloads, want one Job or Pod", len(ws))
	}
	w := ws[0]
	if len(w.spec.Containers) != 1 || len(w.spec.InitContainers) != 0 {
		t.Fatalf("%s: want one container", w.name)
	}
	c := w.spec.Containers[0]
	if c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q (pull %s), want %q (IfNotPresent)", c.Image, c.ImagePullPolicy, image)
	}
	if len(c.Command) > 0 || len(c.Args) > 0 {
		t.Errorf("command %q args %q: the entrypoint with CDI's environment takes none", c.Command, c.Args)
	}
	checkEnv(t, c, e.source, envNames)
	checkSecurity(t, w.spec, c, e.root)
	checkResources(t, c)
	if c.TerminationMessagePath != terminationP || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("termination message %q (%s), want %s read from the file", c.TerminationMessagePath, c.TerminationMessagePolicy, terminationP)
	}
	checkVolumes(t, e, w.spec, c, all)
	checkServices(t, e, m, w, c)
	checkWebIdentity(t, e, m, w.spec, c)
}

// checkWebIdentity: a web identity manifest runs under its own
// ServiceAccount (declared in the file), mounts no API token, projects a
// token for the STS's audience where AWS_WEB_IDENTITY_TOKEN_FILE points,
// and reads no Secret; the other manifests set no AWS_ variable.
func checkWebIdentity(t *testing.T, e expectation, m *manifests, spec *corev1.PodSpec, c corev1.Container) {
	t.Helper()
	env := map[string]corev1.EnvVar{}
	for _, v := range c.Env {
		env[v.Name] = v
		if v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil && e.webIdentity {
			t.Errorf("env %s comes from a Secret", v.Name)
		}
	}
	if !e.webIdentity {
		for name := range env {
			if strings.HasPrefix(name, "AWS_") {
				t.Errorf("env %s in a manifest without web identity", name)
			}
		}
		return
	}
	if len(m.accounts) != 1 || spec.ServiceAccountName != m.accounts[0].Name {
		t.Errorf("serviceAccountName %q: want the ServiceAccount the file declares", spec.ServiceAccountName)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken: want false (the importer needs no API token, only the STS's)")
	}
	for _, name := range []string{"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_REGION"} {
		if env[name].Value == "" {
			t.Errorf("no %s", name)
		}
	}
	var projected *corev1.ServiceAccountTokenProjection
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			t.Errorf("volume %s is a Secret", v.Name)
		}
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				for _, vm := range c.VolumeMounts {
					if vm.Name == v.Name && filepath.Join(vm.MountPath, s.ServiceAccountToken.Path) == env["AWS_WEB_IDENTITY_TOKEN_FILE"].Value {
						projected = s.ServiceAccountToken
					}
				}
			}
		}
	}
	if projected == nil {
		t.Fatalf("AWS_WEB_IDENTITY_TOKEN_FILE %s is no projected ServiceAccount token", env["AWS_WEB_IDENTITY_TOKEN_FILE"].Value)
	}
	if projected.Audience != "sts.amazonaws.com" {
		t.Errorf("token audience %q, want sts.amazonaws.com (what AWS's STS and EKS's webhook use)", projected.Audience)
	}
}

func checkEnv(t *testing.T, c corev1.Container, source string, envNames map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, v := range c.Env {
		if seen[v.Name] {
			t.Errorf("env %s set twice", v.Name)
		}
		seen[v.Name] = true
		if !readByBinary(envNames, v.Name) {
			t.Errorf("env %s is not a variable the importer reads (cmd/importer and its internal/cdi)", v.Name)
		}
		if v.Name == "IMPORTER_SOURCE" && v.Value != source {
			t.Errorf("IMPORTER_SOURCE=%q, want %q", v.Value, source)
		}
		if v.ValueFrom != nil && v.Value != "" {
			t.Errorf("env %s has both value and valueFrom", v.Name)
		}
	}
	if !seen["IMPORTER_SOURCE"] {
		t.Error("no IMPORTER_SOURCE")
	}
	if source == "http" && !seen["IMPORTER_ENDPOINT"] || source == "clone" && !seen["IMPORTER_ENDPOINT"] {
		t.Error("no IMPORTER_ENDPOINT")
	}
	if source == "upload" && (!seen["TLS_CERT"] || !seen["TLS_KEY"] || !seen["IMPORTER_UPLOAD_TOKEN_FILE"]) {
		t.Error("an upload server needs TLS_CERT, TLS_KEY and IMPORTER_UPLOAD_TOKEN_FILE")
	}
}

func checkSecurity(t *testing.T, spec *corev1.PodSpec, c corev1.Container, root bool) {
	t.Helper()
	ps := spec.SecurityContext
	if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod securityContext: want seccompProfile RuntimeDefault")
	}
	if ps != nil {
		wantUser := int64(cdiUser)
		if root {
			wantUser = 0
		}
		if ps.RunAsUser == nil || *ps.RunAsUser != wantUser {
			t.Errorf("runAsUser %v, want %d", ptrString(ps.RunAsUser), wantUser)
		}
		if !root && (ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot) {
			t.Error("runAsNonRoot is not true")
		}
		if !root && (ps.FSGroup == nil || *ps.FSGroup != cdiUser) {
			t.Errorf("fsGroup %v, want %d so the volumes are writable", ptrString(ps.FSGroup), cdiUser)
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no container securityContext")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
}

func checkResources(t *testing.T, c corev1.Container) {
	t.Helper()
	want := resource.MustParse(memoryLimit)
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || limit.Cmp(want) != 0 {
		t.Errorf("memory limit %v, want %s (what the bounded-memory test imports under)", limit.String(), memoryLimit)
	}
	if req, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok || req.Cmp(limit) > 0 {
		t.Errorf("memory request %v: want one, not above the limit", req.String())
	}
}

// checkVolumes matches mounts and devices with the pod's volumes and
// their claims (in this file, or another deploy/ file for a clone source).
func checkVolumes(t *testing.T, e expectation, spec *corev1.PodSpec, c corev1.Container, all map[string]*manifests) {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	claimOf := func(volume string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimVolumeSource) {
		v, ok := volumes[volume]
		if !ok {
			t.Errorf("volume %s is not in the pod", volume)
			return nil, nil
		}
		if v.PersistentVolumeClaim == nil {
			return nil, nil
		}
		for _, m := range all {
			if claim, ok := m.claims[v.PersistentVolumeClaim.ClaimName]; ok {
				return claim, v.PersistentVolumeClaim
			}
		}
		t.Errorf("claim %s is in no deploy/ file", v.PersistentVolumeClaim.ClaimName)
		return nil, v.PersistentVolumeClaim
	}
	mounts := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = true
		want, expected := e.mounts[vm.MountPath]
		if !expected {
			t.Errorf("unexpected mount %s", vm.MountPath)
			continue
		}
		claim, _ := claimOf(vm.Name)
		switch {
		case want == "" && claim != nil:
			t.Errorf("%s is a claim; want another kind of volume", vm.MountPath)
		case want != "" && claim == nil:
			t.Errorf("%s is not a claim", vm.MountPath)
		case claim != nil && (claim.Spec.VolumeMode == nil || *claim.Spec.VolumeMode != want):
			t.Errorf("%s: claim %s has volumeMode %v, want %s", vm.MountPath, claim.Name, claim.Spec.VolumeMode, want)
		}
	}
	for p := range e.mounts {
		if !mounts[p] {
			t.Errorf("nothing mounted at %s", p)
		}
	}
	devices := map[string]bool{}
	for _, d := range c.VolumeDevices {
		devices[d.DevicePath] = true
		readOnly, expected := e.devices[d.DevicePath]
		if !expected {
			t.Errorf("unexpected device %s", d.DevicePath)
			continue
		}
		claim, src := claimOf(d.Name)
		if claim == nil || claim.Spec.VolumeMode == nil || *claim.Spec.VolumeMode != corev1.PersistentVolumeBlock {
			t.Errorf("device %s: want a claim with volumeMode Block", d.DevicePath)
		}
		if src != nil && src.ReadOnly != readOnly {
			t.Errorf("device %s: readOnly %v, want %v", d.DevicePath, src.ReadOnly, readOnly)
		}
	}
	for p := range e.devices {
		if !devices[p] {
			t.Errorf("no device at %s", p)
		}
	}
	if mounts[dataDir] && devices[blockDevice] {
		t.Errorf("both %s and %s: the importer would take the device", dataDir, blockDevice)
	}
}

func checkServices(t *testing.T, e expectation, m *manifests, w workload, c corev1.Container) {
	t.Helper()
	if len(m.services) != e.services {
		t.Fatalf("%d Services, want %d", len(m.services), e.services)
	}
	for _, s := range m.services {
		for k, v := range s.Spec.Selector {
			if w.labels[k] != v {
				t.Errorf("Service %s selects %s=%s; %s has %q", s.Name, k, v, w.name, w.labels[k])
			}
		}
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
				return cp.Name == p.TargetPort.String() || strings.EqualFold(p.TargetPort.String(), itoa(cp.ContainerPort))
			}) {
				t.Errorf("Service %s port %s targets %s, which the container does not expose", s.Name, p.Name, p.TargetPort.String())
			}
		}
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
