package objtest

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// GCPSTS is a token exchange server on 127.0.0.1 as Google documents its
// Security Token Service and IAM Credentials API for workload identity
// federation (a small real server, not Google's):
//
//   - POST /v1/token, form grant_type=urn:ietf:params:oauth:grant-type:token-exchange
//     (RFC 8693) with audience, scope, requested_token_type
//     urn:ietf:params:oauth:token-type:access_token, subject_token_type
//     urn:ietf:params:oauth:token-type:jwt and the subject token: the
//     token's signature is checked against the OIDC issuer's key, its
//     expiry, and that its audience is the exchange's audience; the answer
//     is {access_token, issued_token_type, token_type, expires_in}, or 400
//     {error: invalid_grant, error_description};
//   - POST /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken with
//     the federated token as bearer and {scope, lifetime}: the answer is
//     {accessToken, expireTime}, or 403.
type GCPSTS struct {
	URL            string
	Audience       string // the workload identity provider's audience
	FederatedToken string // what the exchange answers
	ImpersonatedSA string // the service account that may be impersonated
	AccessToken    string // what the impersonation answers
	ExpiresIn      int    // seconds, of both answers
	mu             sync.Mutex
	exchanges      []string // the subject tokens exchanged
	impersonations int
}

// StartGCPSTS starts the exchange server trusting o's key.
func StartGCPSTS(t testing.TB, o *OIDC, audience string) *GCPSTS {
	t.Helper()
	s := &GCPSTS{Audience: audience, FederatedToken: "ya29.federated-token-0001", AccessToken: "ya29.impersonated-token-0001",
		ImpersonatedSA: "importer@project.iam.gserviceaccount.com", ExpiresIn: 3600}
	mux := http.NewServeMux()
	refuse := func(w http.ResponseWriter, status int, code, desc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
	}
	mux.HandleFunc("POST /v1/token", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			refuse(w, http.StatusBadRequest, "invalid_request", "unreadable form")
			return
		}
		f := r.PostForm
		subject := f.Get("subject_token")
		s.mu.Lock()
		s.exchanges = append(s.exchanges, subject)
		s.mu.Unlock()
		switch {
		case f.Get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
			refuse(w, http.StatusBadRequest, "unsupported_grant_type", "grant_type must be token-exchange")
			return
		case f.Get("requested_token_type") != "urn:ietf:params:oauth:token-type:access_token":
			refuse(w, http.StatusBadRequest, "invalid_request", "requested_token_type must be access_token")
			return
		case f.Get("subject_token_type") != "urn:ietf:params:oauth:token-type:jwt":
			refuse(w, http.StatusBadRequest, "invalid_request", "subject_token_type must be jwt")
			return
		case f.Get("audience") != s.Audience:
			refuse(w, http.StatusBadRequest, "invalid_target", "the audience is not this provider's")
			return
		}
		tok, err := jwt.ParseSigned(subject, []jose.SignatureAlgorithm{jose.RS256})
		if err != nil {
			refuse(w, http.StatusBadRequest, "invalid_grant", "the subject token is not a JWT")
			return
		}
		var claims jwt.Claims
		if err := tok.Claims(&o.key.PublicKey, &claims); err != nil {
			refuse(w, http.StatusBadRequest, "invalid_grant", "the subject token's signature is invalid")
			return
		}
		if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: o.URL, AnyAudience: jwt.Audience{s.Audience}, Time: time.Now()}, 0); err != nil {
			refuse(w, http.StatusBadRequest, "invalid_grant", "the subject token is not valid: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": s.FederatedToken, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
			"token_type": "Bearer", "expires_in": s.ExpiresIn})
	})
	mux.HandleFunc("POST /v1/projects/-/serviceAccounts/{sa}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.impersonations++
		s.mu.Unlock()
		var body struct {
			Scope []string `json:"scope"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if r.PathValue("sa") != s.ImpersonatedSA+":generateAccessToken" || r.Header.Get("Authorization") != "Bearer "+s.FederatedToken || len(body.Scope) == 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": 403, "message": "Permission 'iam.serviceAccounts.getAccessToken' denied", "status": "PERMISSION_DENIED"}})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"accessToken": s.AccessToken,
			"expireTime": time.Now().Add(time.Duration(s.ExpiresIn) * time.Second).UTC().Format(time.RFC3339)})
	})
	s.URL = serveLoopback(t, mux)
	return s
}

// TokenURL is the exchange's endpoint (an external account's token_url).
func (s *GCPSTS) TokenURL() string { return s.URL + "/v1/token" }

// ImpersonationURL is the impersonation endpoint of ImpersonatedSA.
func (s *GCPSTS) ImpersonationURL() string {
	return s.URL + "/v1/projects/-/serviceAccounts/" + s.ImpersonatedSA + ":generateAccessToken"
}

// Exchanged returns the subject tokens exchanged so far.
func (s *GCPSTS) Exchanged() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.exchanges...)
}

// Impersonations counts the impersonation requests.
func (s *GCPSTS) Impersonations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.impersonations
}
