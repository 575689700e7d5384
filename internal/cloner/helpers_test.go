package cloner_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/internal/testkit/testpki"
	"github.com/diskimport/engine/uploadserver"
)

// clientName is the name the upload server demands (CDI's CLIENT_NAME).
const clientName = "cdi-cloner"

// pki is the test's CA with a server and a good client certificate.
type pki struct {
	ca     *testpki.CA
	server testpki.Pair
	client testpki.Pair
}

func newPKI(t *testing.T) *pki {
	ca := testpki.NewCA(t, t.TempDir(), "clone-test")
	return &pki{ca: ca, server: ca.Server("upload-server"), client: ca.Client(clientName)}
}

// clientFor is an HTTPS client presenting pair (nil: no certificate).
func (p *pki) clientFor(t *testing.T, pair *testpki.Pair) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = testpki.ClientTLS(t, p.ca, pair)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// served is a running upload server.
type served struct {
	addr string
	done chan struct{}
	res  *importer.Result
	err  error
}

// url is the upload path at the server, or through addr when given.
func (s *served) url(addr string) string {
	if addr == "" {
		addr = s.addr
	}
	return "https://" + addr + uploadserver.PathUpload
}

// wait returns the server's outcome.
func (s *served) wait(t *testing.T) (*importer.Result, error) {
	select {
	case <-s.done:
		return s.res, s.err
	case <-time.After(60 * time.Second):
		t.Fatal("the upload server did not finish")
		return nil, nil
	}
}

// startServer runs our upload server with mutual TLS for target; it is
// stopped when the test ends.
func startServer(t *testing.T, p *pki, imp importer.Options) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	imp.Logger = testimg.Logger(t)
	srv := &uploadserver.Server{
		// The resume window outlasts every test, so a session held for it
		// shows as a refusal or a wait no test survives, never as a
		// matter of seconds.
		Options: uploadserver.Options{Import: imp, ClientName: clientName, Logger: imp.Logger,
			CloneResumeWindow: time.Hour},
		Listener: ln, TLSCert: p.server.CertFile, TLSKey: p.server.KeyFile, ClientCAFile: p.ca.File,
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.res, s.err = srv.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// cuttingProxy forwards TCP to target and cuts the connection that
// carries the cut-th byte from client to server (from server to client
// when back is set), once.
type cuttingProxy struct {
	ln     net.Listener
	target string
	cut    int64
	back   bool
	sent   atomic.Int64
	cutOne sync.Once
	cutted atomic.Bool
	wg     sync.WaitGroup
}

func startCuttingProxy(t *testing.T, target string, cut int64) *cuttingProxy {
	return startProxy(t, &cuttingProxy{target: target, cut: cut})
}

// startServerBehindCut runs our upload server for imp (startServer) behind
// a cuttingProxy that cuts the connection carrying the client's cut-th
// byte.
func startServerBehindCut(t *testing.T, p *pki, imp importer.Options, cut int64) (*served, *cuttingProxy) {
	s := startServer(t, p, imp)
	return s, startCuttingProxy(t, s.addr, cut)
}

// startBackCuttingProxy cuts in the answers' direction.
func startBackCuttingProxy(t *testing.T, target string, cut int64) *cuttingProxy {
	return startProxy(t, &cuttingProxy{target: target, cut: cut, back: true})
}

func startProxy(t *testing.T, p *cuttingProxy) *cuttingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *cuttingProxy) addr() string { return p.ln.Addr().String() }

func (p *cuttingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	}
}

func (p *cuttingProxy) forward(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	back := make(chan struct{})
	go func() {
		defer close(back)
		if !p.back {
			_, _ = io.Copy(client, server)
			return
		}
		p.copyCutting(client, server)
		client.Close()
		server.Close()
	}()
	if p.back {
		_, _ = io.Copy(server, client)
		<-back
		return
	}
	if p.copyCutting(server, client) {
		_ = server.(*net.TCPConn).CloseWrite()
		<-back // the answer still flows back
	}
}

// copyCutting copies from src to dst until either fails, or until the
// cut-th byte of the proxy's counted direction, which it does not pass on;
// it reports whether src ended (EOF).
func (p *cuttingProxy) copyCutting(dst, src net.Conn) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if sent := p.sent.Add(int64(n)); sent >= p.cut && !p.cutted.Load() {
				cutNow := false
				p.cutOne.Do(func() { cutNow = true; p.cutted.Store(true) })
				if cutNow {
					// The bytes before the cut-th go through.
					_, _ = dst.Write(buf[:int64(n)-(sent-p.cut)])
					return false // both sides closed by forward
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}
