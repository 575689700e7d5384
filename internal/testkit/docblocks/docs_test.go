package docblocks

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
var root = filepath.Join("..", "..", "..")

// repoDocs are the markdown files of the repository people read.
func repoDocs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "ARCHITECTURE.md", "deploy/README.md", "bench/RESULTS.md"}
	for _, pattern := range []string{"docs/*.md", "docs/cli/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, rel)
		}
	}
	return files
}

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.+)$`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors returns the anchors GitHub gives the headings of a markdown
// file (lower case, punctuation dropped, spaces as hyphens), code blocks
// left out.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	fenced := false
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil && !fenced {
			slug := notSlug.ReplaceAllString(strings.ToLower(m[1]), "")
			got[strings.ReplaceAll(slug, " ", "-")] = true
		}
	}
	return got
}

// Every relative link of the docs leads to a file that exists, and every
// #anchor to a heading of its file: text moved between files (README.md
// into docs/) keeps its links working.
func TestDocsLinksResolve(t *testing.T) {
	for _, doc := range repoDocs(t) {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := filepath.Join(root, doc)
			if path != "" {
				file = filepath.Join(root, filepath.Dir(doc), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %s: %v", doc, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(t, file)[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", doc, target, file, anchor)
			}
		}
	}
}

// The CDI version the admin's guide names as tested is the one the e2e
// builds CDI's controller from (scripts/e2e/cdi-build.sh's default).
func TestDocsNameTheCDIVersionTheE2ERuns(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(root, "scripts", "e2e", "cdi-build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`CDI_VERSION=\$\{E2E_CDI_VERSION:-(v[0-9.]+)\}`).FindSubmatch(script)
	if m == nil {
		t.Fatal("cdi-build.sh sets no default CDI_VERSION")
	}
	for _, doc := range []string{"docs/cdi.md", "deploy/README.md"} {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "CDI **"+string(m[1])+"**") && !strings.Contains(string(data), "("+string(m[1])+")") {
			t.Errorf("%s does not name %s, the CDI version the e2e runs, as the one tested", doc, m[1])
		}
	}
}

// The manifests' comments describe what exists: no feature is "issue N"
// (deploy/clone.yaml called cross-node cloning issue 12 after
// clone-source shipped).
func TestManifestsPointAtNoIssueForAFeature(t *testing.T) {
	m, err := filepath.Glob(filepath.Join(root, "deploy", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	issue := regexp.MustCompile(`(?i)\bis issue [0-9]+`)
	for _, f := range m {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if loc := issue.FindIndex(data); loc != nil {
			t.Errorf("%s: %q: say where the feature is documented instead", f, data[loc[0]:loc[1]])
		}
	}
}
