package datasource

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// egressRelay gives containers/image our checked dialer. Its docker
// transport builds its own http.Transport with a plain net.Dialer and
// takes no dialer, only a proxy (SystemContext.DockerProxy); so every
// request of a pull is sent through this SOCKS5 relay on 127.0.0.1, which
// makes each connection with EgressPolicy.DialContext: the address is
// resolved and checked by the relay and connected to as checked, for the
// registry, its token endpoint and every redirect (blobs are often
// redirected to another host). A random user name and password keep other
// processes of the pod from using it. A refusal is answered with SOCKS's
// "connection not allowed by ruleset" and kept, so the pull's error can
// name the address and the rule.
type egressRelay struct {
	policy *EgressPolicy
	ln     net.Listener
	user   string
	pass   string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	refused atomic.Pointer[errdefs.EgressError] // the latest refusal
}

// relayHandshakeTimeout bounds a client's SOCKS greeting and request.
const relayHandshakeTimeout = 10 * time.Second

func startEgressRelay(p *EgressPolicy) (*egressRelay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the egress relay for registry pulls: %w", err)
	}
	secret := make([]byte, 32)
	rand.Read(secret) //nolint:errcheck // never fails (crypto/rand)
	ctx, cancel := context.WithCancel(context.Background())
	r := &egressRelay{policy: p, ln: ln, user: "importer", pass: hex.EncodeToString(secret), ctx: ctx, cancel: cancel,
		conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// url is the relay as a proxy URL for containers/image.
func (r *egressRelay) url() *url.URL {
	return &url.URL{Scheme: "socks5", User: url.UserPassword(r.user, r.pass), Host: r.ln.Addr().String()}
}

// close stops the relay and ends the connections it carries.
func (r *egressRelay) close() {
	if r == nil {
		return
	}
	r.cancel()
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// explain replaces a pull error caused by a refusal of the relay with the
// refusal itself (which matches ErrEgressDenied and ErrSourceRefused, so
// it is not retried). Go's SOCKS client reports the refusal by the reply's
// text, the one signal that crosses containers/image.
func (r *egressRelay) explain(err error) error {
	if r == nil || err == nil || !strings.Contains(err.Error(), "not allowed by ruleset") {
		return err
	}
	if e := r.refused.Load(); e != nil {
		return e
	}
	return err
}

func (r *egressRelay) track(c net.Conn, on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !on {
		delete(r.conns, c)
		return true
	}
	if r.ctx.Err() != nil {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *egressRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c, true) {
			c.Close()
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.track(c, false)
			defer c.Close()
			r.serve(c)
		}()
	}
}

// SOCKS5 (RFC 1928) with username/password authentication (RFC 1929):
// the values the relay speaks.
const (
	socksVersion     = 5
	socksAuthVersion = 1
	socksAuthUserPw  = 2
	socksNoMethod    = 0xff
	socksConnect     = 1
	socksAtypIPv4    = 1
	socksAtypDomain  = 3
	socksAtypIPv6    = 4

	socksSucceeded       = 0
	socksGeneralFailure  = 1
	socksNotAllowed      = 2
	socksHostUnreachable = 4
	socksCmdUnsupported  = 7
	socksAtypUnsupported = 8
)

// serve runs one client: authentication, one CONNECT, then the bytes both
// ways until either side ends.
func (r *egressRelay) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(relayHandshakeTimeout)) //nolint:errcheck // a dead peer fails the reads
	target, err := r.handshake(c)
	if err != nil {
		return
	}
	up, err := r.policy.DialContext(r.ctx, "tcp", target)
	if err != nil {
		code := byte(socksHostUnreachable)
		var ee *errdefs.EgressError
		if errors.As(err, &ee) {
			r.refused.Store(ee)
			code = socksNotAllowed
		}
		reply(c, code)
		return
	}
	defer up.Close()
	if !r.track(up, true) {
		return
	}
	defer r.track(up, false)
	if reply(c, socksSucceeded) != nil {
		return
	}
	c.SetDeadline(time.Time{}) //nolint:errcheck // as above
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); closeWrite(up); done <- struct{}{} }() //nolint:errcheck // the other side reports
	go func() { io.Copy(c, up); closeWrite(c); done <- struct{}{} }()  //nolint:errcheck // the other side reports
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite() //nolint:errcheck // the copy's end is what counts
	}
}

// handshake authenticates the client and reads its CONNECT request,
// returning host:port.
func (r *egressRelay) handshake(c net.Conn) (string, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[0] != socksVersion {
		return "", errors.New("not a SOCKS5 greeting")
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return "", err
	}
	if !strings.ContainsRune(string(methods), socksAuthUserPw) {
		c.Write([]byte{socksVersion, socksNoMethod}) //nolint:errcheck // refused anyway
		return "", errors.New("client offers no username/password authentication")
	}
	if _, err := c.Write([]byte{socksVersion, socksAuthUserPw}); err != nil {
		return "", err
	}
	user, pass, err := readAuth(c)
	if err != nil {
		return "", err
	}
	if user != r.user || pass != r.pass {
		c.Write([]byte{socksAuthVersion, 1}) //nolint:errcheck // refused anyway
		return "", errors.New("wrong relay credentials")
	}
	if _, err := c.Write([]byte{socksAuthVersion, 0}); err != nil {
		return "", err
	}
	var req [4]byte
	if _, err := io.ReadFull(c, req[:]); err != nil || req[0] != socksVersion {
		return "", errors.New("not a SOCKS5 request")
	}
	if req[1] != socksConnect {
		reply(c, socksCmdUnsupported)
		return "", errors.New("only CONNECT is relayed")
	}
	var host string
	switch req[3] {
	case socksAtypIPv4, socksAtypIPv6:
		b := make([]byte, map[byte]int{socksAtypIPv4: 4, socksAtypIPv6: 16}[req[3]])
		if _, err := io.ReadFull(c, b); err != nil {
			return "", err
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.String()
	case socksAtypDomain:
		var n [1]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return "", err
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(c, b); err != nil {
			return "", err
		}
		host = string(b)
	default:
		reply(c, socksAtypUnsupported)
		return "", errors.New("unknown address type")
	}
	var port [2]byte
	if _, err := io.ReadFull(c, port[:]); err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port[:])))), nil
}

func readAuth(c net.Conn) (user, pass string, err error) {
	var v [2]byte
	if _, err := io.ReadFull(c, v[:]); err != nil || v[0] != socksAuthVersion {
		return "", "", errors.New("not a username/password request")
	}
	u := make([]byte, v[1])
	if _, err := io.ReadFull(c, u); err != nil {
		return "", "", err
	}
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return "", "", err
	}
	p := make([]byte, n[0])
	if _, err := io.ReadFull(c, p); err != nil {
		return "", "", err
	}
	return string(u), string(p), nil
}

// reply answers a CONNECT; the bound address is not used by HTTP clients.
func reply(c net.Conn, code byte) error {
	_, err := c.Write([]byte{socksVersion, code, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// dockerProxy is the proxy choice of a pull under the policy: an
// operator's proxy from the environment (HTTPS_PROXY and the rest) is
// used as it is, once its address is checked (containers/image then
// connects to it itself, resolving its name again: the proxy is the
// operator's name, not the endpoint's); every other request goes through
// the relay. A literal target address is checked before a proxy is asked
// for it.
func (r *egressRelay) dockerProxy(u *url.URL) (*url.URL, error) {
	pu, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	if err != nil {
		return nil, err
	}
	if pu == nil {
		return r.url(), nil
	}
	if a, ok := hostAddr(u.Hostname()); ok {
		if rule := r.policy.rule(a); rule != "" {
			return nil, &errdefs.EgressError{Host: u.Hostname(), Addr: a.String(), Rule: rule}
		}
	}
	addrs, err := r.policy.lookup(r.ctx, "ip", pu.Hostname())
	if err != nil {
		return nil, fmt.Errorf("resolving proxy %s: %w", pu.Redacted(), err)
	}
	for _, a := range addrs {
		if rule := r.policy.rule(a); rule != "" {
			return nil, &errdefs.EgressError{Host: pu.Hostname(), Addr: a.String(), Rule: rule + " (proxy " + pu.Redacted() + ")"}
		}
	}
	return pu, nil
}
