package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// binaryEnvPackages are where the importer binary reads its environment
// (datasource: the cloud credential chains' AWS_* and GOOGLE_*).
func binaryEnvPackages() []string {
	return []string{"../cmd/importer/internal/cdi", "../cmd/importer", "../datasource"}
}

// envNamesInSource collects the string literals of the binary's
// environment readers: a name the manifests set must be one of them, or
// start with one ending in "_" and go on with digits
// (IMPORTER_EXTRA_HEADER_0). Reading the source keeps the list from
// going stale as variables are added.
func envNamesInSource(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range binaryEnvPackages() {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && isEnvName(s) {
						names[s] = true
					}
				}
				return true
			})
		}
	}
	if !names["IMPORTER_SOURCE"] {
		t.Fatalf("found no IMPORTER_SOURCE in %v: the binary's env readers moved", binaryEnvPackages())
	}
	return names
}

func isEnvName(s string) bool {
	if len(s) < 3 || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return strings.Contains(s, "_")
}

// readByBinary reports whether the binary reads the variable name.
func readByBinary(known map[string]bool, name string) bool {
	if known[name] {
		return true
	}
	for i := len(name) - 1; i > 0 && name[i] >= '0' && name[i] <= '9'; i-- {
		if name[i-1] == '_' && known[name[:i]] {
			return true
		}
	}
	return false
}
