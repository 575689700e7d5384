package datasource

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/diskimport/engine/errdefs"
)

const (
	gcsReadScope    = "https://www.googleapis.com/auth/devstorage.read_only"
	gcsDefaultToken = "https://oauth2.googleapis.com/token"
)

// gcsKeyFile is the part of a Google credentials file we read: a service
// account key, or an authorized user (gcloud auth application-default).
type gcsKeyFile struct {
	Type         string `json:"type"`
	ClientEmail  string `json:"client_email"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	TokenURI     string `json:"token_uri"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	RefreshToken string `json:"refresh_token"`
}

// gcsTokens gets and caches OAuth2 access tokens for a credentials file.
type gcsTokens struct {
	file   string
	key    gcsKeyFile
	rsa    *rsa.PrivateKey
	client *http.Client
	ua     string

	mu      sync.Mutex
	tok     string
	expires time.Time
}

func loadGCSCredentials(file string) (*gcsTokens, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading GCS credentials (GOOGLE_APPLICATION_CREDENTIALS): %w: %w", errdefs.ErrInvalidOptions, err)
	}
	t := &gcsTokens{file: file}
	if err := json.Unmarshal(data, &t.key); err != nil {
		return nil, fmt.Errorf("GCS credentials %s are not JSON: %w: %w", file, errdefs.ErrInvalidOptions, err)
	}
	if t.key.TokenURI == "" {
		t.key.TokenURI = gcsDefaultToken
	}
	switch t.key.Type {
	case "service_account":
		block, _ := pem.Decode([]byte(t.key.PrivateKey))
		if block == nil || t.key.ClientEmail == "" {
			return nil, fmt.Errorf("GCS credentials %s: a service-account key needs client_email and a PEM private_key: %w", file, errdefs.ErrInvalidOptions)
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if err != nil || !ok {
			return nil, fmt.Errorf("GCS credentials %s: private_key is not an RSA key: %w", file, errdefs.ErrInvalidOptions)
		}
		t.rsa = rk
	case "authorized_user":
		if t.key.ClientID == "" || t.key.ClientSecret == "" || t.key.RefreshToken == "" {
			return nil, fmt.Errorf("GCS credentials %s: an authorized user needs client_id, client_secret and refresh_token: %w", file, errdefs.ErrInvalidOptions)
		}
	default:
		return nil, fmt.Errorf("GCS credentials %s: type %q is not service_account or authorized_user: %w", file, t.key.Type, errdefs.ErrInvalidOptions)
	}
	return t, nil
}

// token returns a valid access token, fetching one when the cached token
// is missing or expires within a minute.
func (t *gcsTokens) token(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok != "" && time.Until(t.expires) > time.Minute {
		return t.tok, nil
	}
	form := url.Values{}
	if t.rsa != nil {
		assertion, err := t.jwt(time.Now())
		if err != nil {
			return "", err
		}
		form.Set("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
		form.Set("assertion", assertion)
	} else {
		form.Set("grant_type", "refresh_token")
		form.Set("client_id", t.key.ClientID)
		form.Set("client_secret", t.key.ClientSecret)
		form.Set("refresh_token", t.key.RefreshToken)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.key.TokenURI, strings.NewReader(form.Encode()))
	if err != nil {
		return "", fmt.Errorf("GCS token endpoint %q: %w: %w", t.key.TokenURI, errdefs.ErrInvalidOptions, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if t.ua != "" {
		req.Header.Set("User-Agent", t.ua)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("getting a GCS access token from %s: %w: %w", t.key.TokenURI, errdefs.ErrSourceUnreachable, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	_ = json.Unmarshal(body, &out)
	if resp.StatusCode != http.StatusOK || out.AccessToken == "" {
		serr := &errdefs.HTTPStatusError{URL: t.key.TokenURI, StatusCode: resp.StatusCode, Status: resp.Status}
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			// Not a refusal: may pass (the source retries it).
			return "", fmt.Errorf("getting a GCS access token from %s: %s: %w", t.key.TokenURI, resp.Status, errdefs.ErrSourceUnreachable)
		}
		return "", fmt.Errorf("GCS credentials %s refused by %s: wrong credentials (%s: %s): %w", t.file, t.key.TokenURI, out.Error, out.Description, serr)
	}
	t.tok = out.AccessToken
	t.expires = time.Now().Add(time.Duration(out.ExpiresIn) * time.Second)
	return t.tok, nil
}

// jwt is the signed assertion of a service account (RFC 7523).
func (t *gcsTokens) jwt(now time.Time) (string, error) {
	enc := base64.RawURLEncoding
	hdr, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": t.key.PrivateKeyID})
	claims, _ := json.Marshal(map[string]any{
		"iss": t.key.ClientEmail, "scope": gcsReadScope, "aud": t.key.TokenURI,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	signing := enc.EncodeToString(hdr) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, t.rsa, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("signing the GCS token request: %w: %w", errdefs.ErrInvalidOptions, err)
	}
	return signing + "." + enc.EncodeToString(sig), nil
}

// gcsError turns a 4xx answer into a refusal naming the case, with the
// server's code and message (XML API documents, or JSON API errors).
func gcsError(resp *http.Response, object string) error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	var doc s3ErrorDoc // the XML API's <Error><Code/><Message/></Error>
	var js struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	code, msg := "", ""
	if xml.Unmarshal(body, &doc) == nil && doc.Code != "" {
		code, msg = doc.Code, doc.Message
	} else if json.Unmarshal(body, &js) == nil && js.Error.Message != "" {
		msg = js.Error.Message
	} else {
		msg = strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200]
		}
	}
	serr := &errdefs.HTTPStatusError{URL: object, StatusCode: resp.StatusCode, Status: resp.Status}
	lower := strings.ToLower(code + " " + msg)
	var what string
	switch {
	case code == "NoSuchBucket" || strings.Contains(lower, "bucket does not exist") || strings.Contains(lower, "no such bucket"):
		what = "the bucket does not exist"
	case resp.StatusCode == http.StatusNotFound:
		what = "no such object"
	case resp.StatusCode == http.StatusUnauthorized:
		what = "wrong credentials"
	case resp.StatusCode == http.StatusForbidden:
		what = "access denied"
	default:
		what = "refused"
	}
	detail := msg
	if code != "" {
		detail = code + ": " + msg
	}
	if detail != "" {
		return fmt.Errorf("GCS %s: %s (%s): %w", object, what, detail, serr)
	}
	return fmt.Errorf("GCS %s: %s: %w", object, what, serr)
}
