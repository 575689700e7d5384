// Package kubeapitest runs a real HTTPS server on 127.0.0.1 standing in
// for the Kubernetes API server in tests of the DataImportCron poller: it
// holds one DataImportCron's annotations, answers its GET with a bearer
// token checked, applies a JSON patch of "add" operations to them (as the
// API server would: an "add" into a map that does not exist fails), and
// records every request. Its certificate comes from a CA of its own,
// made at test time.
package kubeapitest

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/diskimport/engine/internal/testkit/testpki"
)

// Server is a running stand-in API server.
type Server struct {
	srv *httptest.Server
	// Host and Port are where it listens (127.0.0.1), as
	// KUBERNETES_SERVICE_HOST and _PORT name them.
	Host, Port string
	// CAPEM is the CA its certificate chains to: a pod's ca.crt.
	CAPEM []byte
	// Token is the service-account token it accepts.
	Token string
	path  string

	mu          sync.Mutex
	annotations map[string]string // nil: the object has none
	requests    []Request
	refuse      int
}

// Request is one request the server received.
type Request struct {
	Method, Path, ContentType, Authorization string
	Body                                     []byte
}

// CronPath is a DataImportCron's path in the API.
func CronPath(ns, name string) string {
	return "/apis/cdi.kubevirt.io/v1beta1/namespaces/" + ns + "/dataimportcrons/" + name
}

// Start serves the DataImportCron ns/name with these annotations (nil:
// none) until the test ends.
func Start(t testing.TB, ns, name string, annotations map[string]string) *Server {
	t.Helper()
	ca := testpki.NewCA(t, t.TempDir(), "kubernetes")
	s := &Server{CAPEM: ca.PEM, Token: "sa-token-of-the-test", path: CronPath(ns, name), annotations: annotations}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server("kube-apiserver").TLS(t)}}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	var err error
	if s.Host, s.Port, err = net.SplitHostPort(strings.TrimPrefix(s.srv.URL, "https://")); err != nil {
		t.Fatal(err)
	}
	return s
}

// Refuse makes every later request answer status with a Status object
// saying the service account may not (0: answer normally again).
func (s *Server) Refuse(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = status
}

// State returns a copy of the annotations and of the requests so far.
func (s *Server) State() (map[string]string, []Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ann := map[string]string{}
	for k, v := range s.annotations {
		ann[k] = v
	}
	return ann, append([]Request(nil), s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), body})
	status := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "code": code})
	}
	switch {
	case s.refuse != 0:
		status(s.refuse, `dataimportcrons.cdi.kubevirt.io is forbidden: User "system:serviceaccount:cdi:cdi-cronjob" cannot get resource "dataimportcrons"`)
	case r.Header.Get("Authorization") != "Bearer "+s.Token:
		status(http.StatusUnauthorized, "Unauthorized")
	case r.URL.Path != s.path:
		status(http.StatusNotFound, "the server could not find the requested resource: "+r.URL.Path)
	case r.Method == http.MethodGet:
		meta := map[string]any{"name": s.path[strings.LastIndexByte(s.path, '/')+1:]}
		if s.annotations != nil {
			meta["annotations"] = s.annotations
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataImportCron", "metadata": meta})
	case r.Method == http.MethodPatch && r.Header.Get("Content-Type") == "application/json-patch+json":
		if msg := s.applyLocked(body); msg != "" {
			status(http.StatusUnprocessableEntity, msg)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	default:
		status(http.StatusUnsupportedMediaType, r.Method+" with "+r.Header.Get("Content-Type"))
	}
}

// applyLocked applies a JSON patch of "add" operations under
// /metadata/annotations; it returns why it cannot, "" when it did.
func (s *Server) applyLocked(body []byte) string {
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(body, &ops); err != nil {
		return err.Error()
	}
	next := map[string]string(nil)
	if s.annotations != nil {
		next = map[string]string{}
		for k, v := range s.annotations {
			next[k] = v
		}
	}
	for _, op := range ops {
		switch {
		case op.Op == "add" && op.Path == "/metadata/annotations":
			next = map[string]string{}
			if err := json.Unmarshal(op.Value, &next); err != nil {
				return err.Error()
			}
		case op.Op == "add" && strings.HasPrefix(op.Path, "/metadata/annotations/") && next != nil:
			key := strings.NewReplacer("~1", "/", "~0", "~").Replace(strings.TrimPrefix(op.Path, "/metadata/annotations/"))
			var v string
			if err := json.Unmarshal(op.Value, &v); err != nil {
				return err.Error()
			}
			next[key] = v
		default:
			return "the server rejected our request due to an error in our request: " + op.Op + " " + op.Path
		}
	}
	s.annotations = next
	return ""
}
