package importer

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/diskimport/engine/datasource"
)

// sampleValue is a valid, non-zero value for a field of the options: the
// validated strings get a value request accepts.
func sampleValue(t *testing.T, f reflect.StructField) reflect.Value {
	t.Helper()
	valid := map[string]any{
		"ContentType":         ContentTypeAsIs,
		"Format":              "qcow2",
		"FormatIn":            "raw",
		"CacheMode":           "writeback",
		"FilesystemOverhead":  0.25,
		"Mode":                os.FileMode(0o600),
		"ExpectContentDigest": "blk-sha256:" + strings.Repeat("ab", 32),
	}
	if v, ok := valid[f.Name]; ok {
		return reflect.ValueOf(v).Convert(f.Type)
	}
	switch f.Type.Kind() {
	case reflect.String:
		return reflect.ValueOf("x").Convert(f.Type)
	case reflect.Bool:
		return reflect.ValueOf(true)
	case reflect.Int, reflect.Int64:
		if f.Type == reflect.TypeFor[time.Duration]() {
			return reflect.ValueOf(time.Minute)
		}
		return reflect.ValueOf(7).Convert(f.Type)
	case reflect.Pointer:
		return reflect.New(f.Type.Elem())
	case reflect.Slice:
		if f.Type.Elem().Kind() == reflect.String {
			return reflect.ValueOf([]string{"X-Sample: 1"})
		}
	}
	t.Fatalf("no sample value for %s %s: add one", f.Name, f.Type)
	return reflect.Value{}
}

// TestEveryTargetOptionReachesTheEngine sets each field of TargetOptions
// on its own and finds it set in the engine's request: a field the facade
// dropped would leave the request's copy zero.
func TestEveryTargetOptionReachesTheEngine(t *testing.T) {
	fields := reflect.VisibleFields(reflect.TypeFor[TargetOptions]())
	for _, f := range fields {
		t.Run(f.Name, func(t *testing.T) {
			o := Options{Source: "/nonexistent/disk.img", Target: t.TempDir()}
			reflect.ValueOf(&o.TargetOptions).Elem().FieldByIndex(f.Index).Set(sampleValue(t, f))
			r, err := request(o)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			got := reflect.ValueOf(r.Settings).FieldByName(f.Name)
			if !got.IsValid() || got.IsZero() {
				t.Fatalf("Options.%s set, the engine's request has it zero", f.Name)
			}
		})
	}
}

// TestEveryAccessOptionReachesTheSource sets each field of datasource.Access
// on its own and finds it in the Config the source is built with.
func TestEveryAccessOptionReachesTheSource(t *testing.T) {
	for _, f := range reflect.VisibleFields(reflect.TypeFor[datasource.Access]()) {
		t.Run(f.Name, func(t *testing.T) {
			o := Options{Source: "https://example.org/disk.img", Target: t.TempDir()}
			reflect.ValueOf(&o.Access).Elem().FieldByIndex(f.Index).Set(sampleValue(t, f))
			c, err := sourceConfig(o)
			if err != nil {
				t.Fatalf("sourceConfig: %v", err)
			}
			if reflect.ValueOf(c.Access).FieldByIndex(f.Index).IsZero() {
				t.Fatalf("Options.%s set, the source's Config has it zero", f.Name)
			}
		})
	}
}
