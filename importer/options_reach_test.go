package importer

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
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

// eachFieldAlone sets each field of the struct that field(&o) points to,
// alone, on Options naming src, and fails when reached(o) has it zero.
func eachFieldAlone(t *testing.T, src string, field func(*Options) any, reached func(*testing.T, Options) reflect.Value) {
	var o0 Options
	typ := reflect.TypeOf(field(&o0)).Elem()
	for _, f := range reflect.VisibleFields(typ) {
		t.Run(f.Name, func(t *testing.T) {
			o := Options{Source: src, Target: t.TempDir()}
			reflect.ValueOf(field(&o)).Elem().FieldByIndex(f.Index).Set(sampleValue(t, f))
			if reached(t, o).FieldByIndex(f.Index).IsZero() {
				t.Fatalf("Options.%s set, it did not get through", f.Name)
			}
		})
	}
}

// TestEveryTargetOptionReachesTheEngine sets each field of TargetOptions
// on its own and finds it set in the engine's request: a field the facade
// dropped would leave the request's copy zero.
func TestEveryTargetOptionReachesTheEngine(t *testing.T) {
	eachFieldAlone(t, "/nonexistent/disk.img", func(o *Options) any { return &o.TargetOptions }, func(t *testing.T, o Options) reflect.Value {
		r, err := newRequest(o)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		return reflect.ValueOf(r.TargetOptions)
	})
}

// TestEveryAccessOptionReachesTheSource sets each field of datasource.Access
// on its own and finds it in the Config the source is built with.
func TestEveryAccessOptionReachesTheSource(t *testing.T) {
	eachFieldAlone(t, "https://example.org/disk.img", func(o *Options) any { return &o.Access }, func(t *testing.T, o Options) reflect.Value {
		c, err := sourceConfig(o)
		if err != nil {
			t.Fatalf("sourceConfig: %v", err)
		}
		return reflect.ValueOf(c.Access)
	})
}
