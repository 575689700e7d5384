package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of one deploy/*.yaml file, decoded strictly.
type manifests struct {
	file     string
	claims   map[string]*corev1.PersistentVolumeClaim
	jobs     []*batchv1.Job
	pods     []*corev1.Pod
	services []*corev1.Service
	accounts []*corev1.ServiceAccount
}

// workload is a pod spec to check: a Job's template or a Pod's spec.
type workload struct {
	name   string
	labels map[string]string
	spec   *corev1.PodSpec
}

func (m *manifests) workloads() []workload {
	var ws []workload
	for _, j := range m.jobs {
		ws = append(ws, workload{name: "Job " + j.Name, labels: j.Spec.Template.Labels, spec: &j.Spec.Template.Spec})
	}
	for _, p := range m.pods {
		ws = append(ws, workload{name: "Pod " + p.Name, labels: p.Labels, spec: &p.Spec})
	}
	return ws
}

// documentSeparator splits a multi-document YAML stream.
func documentSeparator() *regexp.Regexp { return regexp.MustCompile(`(?m)^---\s*$`) }

// readManifests decodes every document of file into its k8s.io/api type;
// a field the type does not have, a duplicate field or an unknown kind
// fails the test.
func readManifests(t *testing.T, file string) *manifests {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{file: filepath.Base(file), claims: map[string]*corev1.PersistentVolumeClaim{}}
	for i, doc := range documentSeparator().Split(string(data), -1) {
		if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
			continue
		}
		if err := m.decode([]byte(doc)); err != nil {
			t.Fatalf("%s, document %d: %v", m.file, i+1, err)
		}
	}
	return m
}

func (m *manifests) decode(doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	strict := func(into any) error { return yaml.UnmarshalStrict(doc, into) }
	switch meta.APIVersion + " " + meta.Kind {
	case "v1 PersistentVolumeClaim":
		c := &corev1.PersistentVolumeClaim{}
		if err := strict(c); err != nil {
			return err
		}
		m.claims[c.Name] = c
	case "batch/v1 Job":
		j := &batchv1.Job{}
		if err := strict(j); err != nil {
			return err
		}
		m.jobs = append(m.jobs, j)
	case "v1 Pod":
		p := &corev1.Pod{}
		if err := strict(p); err != nil {
			return err
		}
		m.pods = append(m.pods, p)
	case "v1 Service":
		s := &corev1.Service{}
		if err := strict(s); err != nil {
			return err
		}
		m.services = append(m.services, s)
	case "v1 ServiceAccount":
		a := &corev1.ServiceAccount{}
		if err := strict(a); err != nil {
			return err
		}
		m.accounts = append(m.accounts, a)
	default:
		return fmt.Errorf("unexpected kind %q %q", meta.APIVersion, meta.Kind)
	}
	return nil
}

// stripComments drops comment-only lines, to tell an empty document.
func stripComments(doc []byte) []byte {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAll(doc, nil)
}

func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	m := &manifests{claims: map[string]*corev1.PersistentVolumeClaim{}}
	doc := []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n    - name: c\n      image: i\n      envv: []\n")
	if err := m.decode(doc); err == nil {
		t.Fatal("a Pod with a misspelt field decoded")
	}
}
