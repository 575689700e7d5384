package objtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// OIDC is an OpenID Connect issuer on 127.0.0.1 as an STS sees one: a
// discovery document and a JWKS with one RSA key, and tokens it signs the
// way a Kubernetes API server signs projected ServiceAccount tokens
// (RS256, a kid, iss, sub, aud, iat, nbf, exp).
type OIDC struct {
	URL       string // the issuer: URL + "/.well-known/openid-configuration" is the discovery document
	ConfigURL string
	key       *rsa.PrivateKey
	kid       string
}

// StartOIDC starts an issuer with a fresh 2048-bit key.
func StartOIDC(t testing.TB) *OIDC {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// The URL is known before the first request: the handlers read it.
	l := listenLoopback(t)
	o := &OIDC{URL: "http://" + l.Addr().String(), key: key, kid: "test-issuer-key-1"}
	o.ConfigURL = o.URL + "/.well-known/openid-configuration"
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                o.URL,
			"jwks_uri":                              o.URL + "/openid/v1/jwks",
			"authorization_endpoint":                o.URL + "/authorize",
			"token_endpoint":                        o.URL + "/token",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
			"scopes_supported":                      []string{"openid"},
			"claims_supported":                      []string{"sub", "aud", "exp", "iat", "iss", "policy"},
		})
	})
	mux.HandleFunc("/openid/v1/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &o.key.PublicKey, KeyID: o.kid, Algorithm: string(jose.RS256), Use: "sig"},
		}})
	})
	serve(t, l, mux)
	return o
}

// TokenOptions describe one token; the zero value is a valid token for
// no audience that expires in an hour.
type TokenOptions struct {
	Audience string
	Subject  string        // default system:serviceaccount:default:importer
	Lifetime time.Duration // from now; negative: already expired. 0: an hour
	Claims   map[string]any
	// ForeignKey signs with a key the JWKS does not hold (under the same
	// kid), as a token from another issuer posing as this one.
	ForeignKey bool
}

// Token signs a token.
func (o *OIDC) Token(t testing.TB, opt TokenOptions) string {
	t.Helper()
	key := o.key
	if opt.ForeignKey {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			t.Fatal(err)
		}
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", o.kid))
	if err != nil {
		t.Fatal(err)
	}
	if opt.Subject == "" {
		opt.Subject = "system:serviceaccount:default:importer"
	}
	if opt.Lifetime == 0 {
		opt.Lifetime = time.Hour
	}
	now := time.Now()
	std := jwt.Claims{
		Issuer:   o.URL,
		Subject:  opt.Subject,
		Audience: jwt.Audience{opt.Audience},
		IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)),
		Expiry:   jwt.NewNumericDate(now.Add(opt.Lifetime)),
	}
	if opt.Lifetime > 0 {
		std.NotBefore = jwt.NewNumericDate(now.Add(-time.Minute))
	} else {
		std.IssuedAt = jwt.NewNumericDate(now.Add(opt.Lifetime - time.Hour))
	}
	tok, err := jwt.Signed(sig).Claims(std).Claims(opt.Claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// serveLoopback serves h on 127.0.0.1 until the test ends; it returns the
// server's URL.
func serveLoopback(t testing.TB, h http.Handler) string {
	t.Helper()
	return serve(t, listenLoopback(t), h)
}

// listenLoopback listens on a port of 127.0.0.1 the OS picks.
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serve serves h on l until the test ends and returns its URL.
func serve(t testing.TB, l net.Listener, h http.Handler) string {
	t.Helper()
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}
