package datasource_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/diskimport/engine/datasource"
)

// New picks the source from the endpoint's scheme; a plain path or a
// file:/// URL is a local file.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "datasource-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(p, []byte("raw disk bytes"), 0o644); err != nil {
		panic(err)
	}

	src, err := datasource.New("file://"+p, datasource.Config{})
	if err != nil {
		panic(err)
	}
	st, err := src.Open(context.Background())
	if err != nil {
		panic(err)
	}
	defer st.Body.Close()
	data, err := io.ReadAll(st.Body)
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Size, string(data), st.LocalPath == p)
	// Output: 14 raw disk bytes true
}

// Every source takes the same Config; an HTTP source uses its credentials,
// headers, TLS, proxy and retry fields.
func ExampleNewHTTP() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "secret" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "image bytes")
	}))
	defer srv.Close()

	conf := datasource.Config{
		Access: datasource.Access{
			Username:     "user",
			Password:     "secret",
			RetryBackoff: 10 * time.Millisecond,
			StallTimeout: time.Minute,
		},
		Retries: 3,
	}
	src, err := datasource.NewHTTP(srv.URL+"/disk.img", conf)
	if err != nil {
		panic(err)
	}
	st, err := src.Open(context.Background())
	if err != nil {
		panic(err)
	}
	defer st.Body.Close()
	data, _ := io.ReadAll(st.Body)
	fmt.Println(string(data), src.(datasource.RetryReporter).Retries())
	// Output: image bytes 0
}

// A program adds a kind of source by registering its opener on a Registry
// of its own.
func ExampleRegistry_Register() {
	r := datasource.Builtin()
	r.Register("mem://", func(endpoint string, _ datasource.Config) (datasource.Source, error) {
		return datasource.NewReader(endpoint, strings.NewReader(strings.TrimPrefix(endpoint, "mem://"))), nil
	})
	src, err := r.New("mem://hello", datasource.Config{})
	if err != nil {
		panic(err)
	}
	st, err := src.Open(context.Background())
	if err != nil {
		panic(err)
	}
	data, _ := io.ReadAll(st.Body)
	fmt.Printf("%s: %s\n", src, data)
	// Output: mem://hello: hello
}
