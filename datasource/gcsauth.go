package datasource

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"time"

	"cloud.google.com/go/compute/metadata"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/diskimport/engine/errdefs"
)

// gcsReadScope is the scope of the access tokens: reading objects.
const gcsReadScope = "https://www.googleapis.com/auth/devstorage.read_only"

// gcsTokenMargin: a cached token is renewed when it expires within this
// margin, so that no request (or its retries) leaves with a token about to
// lapse.
const gcsTokenMargin = time.Minute

// gcsKeyFile is what loadGCSCredentials checks of a Google credentials file
// before golang.org/x/oauth2/google reads it: a service-account key, an
// authorized user (gcloud auth application-default login), or an external
// account (workload identity federation).
type gcsKeyFile struct {
	Type         string `json:"type"`
	ClientEmail  string `json:"client_email"`
	PrivateKey   string `json:"private_key"`
	TokenURI     string `json:"token_uri"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	RefreshToken string `json:"refresh_token"`

	// external_account
	Audience         string `json:"audience"`
	SubjectTokenType string `json:"subject_token_type"`
	TokenURL         string `json:"token_url"`
	ImpersonationURL string `json:"service_account_impersonation_url"`
	CredentialSource *struct {
		File          string          `json:"file"`
		URL           string          `json:"url"`
		Executable    json.RawMessage `json:"executable"`
		EnvironmentID string          `json:"environment_id"`
	} `json:"credential_source"`
}

// gcsTokens gets and caches the access tokens of a credentials file with
// golang.org/x/oauth2/google: the JWT-bearer exchange of a service-account
// key (RFC 7523), the refresh-token grant of an authorized user, or an
// external account's exchange of its subject token at an STS (RFC 8693),
// then, when the file names one, the impersonation of a service account;
// or, with no file, the metadata server's token of the instance's (the GKE
// node's or workload identity's) service account, with
// cloud.google.com/go/compute/metadata. Every request goes through the
// credential client (CA, proxy, egress policy, no redirect).
type gcsTokens struct {
	file     string // "" for the metadata server
	data     []byte
	kind     google.CredentialsType
	tokenURL string           // the file's token endpoint as messages show it (RedactURL)
	meta     *metadata.Client // the metadata server, when file is ""
	base     http.RoundTripper
	ua       string

	mu  sync.Mutex
	tok *oauth2.Token
}

func loadGCSCredentials(file string) (*gcsTokens, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading GCS credentials (GOOGLE_APPLICATION_CREDENTIALS): %w: %w", errdefs.ErrInvalidOptions, err)
	}
	var k gcsKeyFile
	if err := json.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("GCS credentials %s are not JSON: %w: %w", file, errdefs.ErrInvalidOptions, err)
	}
	if k.TokenURI == "" {
		k.TokenURI = google.Endpoint.TokenURL
	}
	t := &gcsTokens{file: file, data: data, tokenURL: RedactURL(k.TokenURI)}
	switch k.Type {
	case "service_account":
		// Checked now, so that a broken key fails as an option and not as
		// a token request at the first read.
		block, _ := pem.Decode([]byte(k.PrivateKey))
		if block == nil || k.ClientEmail == "" {
			return nil, fmt.Errorf("GCS credentials %s: a service-account key needs client_email and a PEM private_key: %w", file, errdefs.ErrInvalidOptions)
		}
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		}
		if _, ok := key.(*rsa.PrivateKey); err != nil || !ok {
			return nil, fmt.Errorf("GCS credentials %s: private_key is not an RSA key: %w", file, errdefs.ErrInvalidOptions)
		}
		t.kind = google.ServiceAccount
	case "authorized_user":
		if k.ClientID == "" || k.ClientSecret == "" || k.RefreshToken == "" {
			return nil, fmt.Errorf("GCS credentials %s: an authorized user needs client_id, client_secret and refresh_token: %w", file, errdefs.ErrInvalidOptions)
		}
		t.kind = google.AuthorizedUser
	case "external_account":
		if err := checkExternalAccount(file, &k); err != nil {
			return nil, err
		}
		t.kind, t.tokenURL = google.ExternalAccount, RedactURL(k.TokenURL)
	default:
		// The other kinds (impersonated_service_account,
		// external_account_authorized_user, gdch…) are not read.
		return nil, fmt.Errorf("GCS credentials %s: type %q is not service_account, authorized_user or external_account: %w", file, k.Type, errdefs.ErrInvalidOptions)
	}
	return t, nil
}

// checkExternalAccount checks a workload identity federation file: its
// subject token comes from a file (a Kubernetes projected ServiceAccount
// token, an OIDC token), read again at every exchange. A subject token
// fetched from a URL, a program or the AWS metadata service is refused:
// those reach places or run programs the import's settings should not
// decide on.
func checkExternalAccount(file string, k *gcsKeyFile) error {
	bad := func(why string) error {
		return fmt.Errorf("GCS credentials %s: external_account: %s: %w", file, why, errdefs.ErrInvalidOptions)
	}
	cs := k.CredentialSource
	switch {
	case k.Audience == "" || k.SubjectTokenType == "" || k.TokenURL == "":
		return bad("audience, subject_token_type and token_url are needed")
	case cs == nil:
		return bad("credential_source is needed")
	case cs.EnvironmentID != "" || cs.URL != "" || len(cs.Executable) > 0:
		return bad("only a subject token from a file (credential_source.file) is read, not from a URL, a program or the AWS metadata service")
	case cs.File == "":
		return bad("credential_source.file is needed")
	}
	for _, u := range []string{k.TokenURL, k.ImpersonationURL} {
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" || p.User != nil {
			return bad(fmt.Sprintf("%q is not an http(s)://host URL", RedactURL(u)))
		}
	}
	if _, err := readTokenFile("credential_source.file", cs.File); err != nil {
		return fmt.Errorf("GCS credentials %s: external_account: %w", file, err)
	}
	return nil
}

// gcsMetadataTokens gets the tokens of the instance's service account from
// the metadata server (GCE_METADATA_HOST, else 169.254.169.254).
func gcsMetadataTokens() *gcsTokens {
	host := os.Getenv("GCE_METADATA_HOST")
	if host == "" {
		host = "169.254.169.254"
	}
	return &gcsTokens{tokenURL: "the metadata server http://" + host}
}

// gcsMetadataEndpoints are the addresses the metadata server's requests
// may reach past the egress policy: 169.254.169.254 and GCE_METADATA_HOST's
// address.
func gcsMetadataEndpoints() []netip.Addr {
	out := []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	if a, ok := credentialEndpointAddr("http://" + os.Getenv("GCE_METADATA_HOST")); ok {
		out = append(out, a)
	}
	return out
}

// token returns a valid access token, fetching one when none is cached or
// the cached one expires within gcsTokenMargin (a token without an expiry
// is kept).
func (t *gcsTokens) token(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok != nil && (t.tok.Expiry.IsZero() || time.Until(t.tok.Expiry) > gcsTokenMargin) {
		return t.tok.AccessToken, nil
	}
	var attempt credentialAttempt
	ctx = withCredentialAttempt(ctx, &attempt)
	ct := &contextTransport{base: t.base, ctx: ctx, ua: t.ua}
	client := &http.Client{
		Transport: ct,
		// The request's body is the signed assertion, the refresh token or
		// the subject token: a redirect is taken as the answer (a refusal),
		// never followed with that body to wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       credentialRequestTimeout,
	}
	if t.file == "" {
		return t.metadataToken(ctx, client, &attempt)
	}
	// Built for each fetch: the library keeps the context it is given for
	// its requests, and this one is the current request's.
	creds, err := google.CredentialsFromJSONWithTypeAndParams(context.WithValue(ctx, oauth2.HTTPClient, client),
		t.data, t.kind, google.CredentialsParams{Scopes: []string{gcsReadScope}})
	if err != nil {
		return "", fmt.Errorf("GCS credentials %s: %w: %w", t.file, errdefs.ErrInvalidOptions, err)
	}
	tok, err := creds.TokenSource.Token()
	if err != nil {
		// The library flattens the transport's error into its text; an
		// egress refusal keeps its own reason and is not retried.
		var egress *errdefs.EgressError
		if errors.As(ct.err, &egress) {
			return "", fmt.Errorf("getting a GCS access token from %s: %w", RedactURL(t.tokenURL), egress)
		}
		var re *oauth2.RetrieveError
		if !errors.As(err, &re) && t.kind == google.ExternalAccount {
			// The STS exchange and the impersonation report a refusal as
			// text; the status was recorded.
			return "", attempt.classify("GCS external account credentials "+t.file+" (token exchange at "+t.tokenURL+")", t.tokenURL, err)
		}
		return "", t.tokenError(err)
	}
	if tok.AccessToken == "" {
		return "", fmt.Errorf("GCS credentials %s: %s answered without an access token: %w", t.file, t.tokenURL, errdefs.ErrSourceRefused)
	}
	t.tok = tok
	return tok.AccessToken, nil
}

// tokenError classifies a failed token request: the endpoint's refusal
// (4xx, or a redirect) with its OAuth2 error code and description, a
// failure that may pass (5xx, 429: the source retries it), or no answer.
func (t *gcsTokens) tokenError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.Response == nil {
		return fmt.Errorf("getting a GCS access token from %s: %w: %w", t.tokenURL, errdefs.ErrSourceUnreachable, redactErrorURLs(err))
	}
	status := re.Response.StatusCode
	if status >= 500 || status == http.StatusTooManyRequests {
		return fmt.Errorf("getting a GCS access token from %s: %s: %w", t.tokenURL, re.Response.Status, errdefs.ErrSourceUnreachable)
	}
	serr := &errdefs.HTTPStatusError{URL: t.tokenURL, StatusCode: status, Status: re.Response.Status}
	if status >= 300 && status < 400 {
		return fmt.Errorf("GCS credentials %s: the token endpoint %s redirected, and the key's request is not sent elsewhere: %w", t.file, t.tokenURL, serr)
	}
	code, desc := re.ErrorCode, re.ErrorDescription
	if code == "" { // the JWT exchange leaves the body unparsed
		var body struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(re.Body, &body)
		code, desc = body.Error, body.Description
	}
	return fmt.Errorf("GCS credentials %s refused by %s: wrong credentials (%s: %s): %w", t.file, t.tokenURL, code, desc, serr)
}

// contextTransport sends each request under ctx, with the user agent: the
// library's JWT exchange builds its request without a context, and a
// cancelled import must still stop it.
type contextTransport struct {
	base http.RoundTripper
	ctx  context.Context
	ua   string
	err  error // the last request's transport error
}

func (c *contextTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(c.ctx)
	if c.ua != "" {
		r.Header.Set("User-Agent", c.ua)
	}
	resp, err := c.base.RoundTrip(r)
	c.err = err
	return resp, err
}

// metadataToken gets a token of the instance's service account from the
// metadata server, and caches it.
func (t *gcsTokens) metadataToken(ctx context.Context, client *http.Client, attempt *credentialAttempt) (string, error) {
	what := "GCS credentials from " + t.tokenURL
	body, err := metadata.NewClient(client).GetWithContext(ctx, "instance/service-accounts/default/token?scopes="+url.QueryEscape(gcsReadScope))
	if err != nil {
		return "", attempt.classify(what, t.tokenURL, err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		TokenType   string `json:"token_type"`
	}
	if err := json.Unmarshal([]byte(body), &tok); err != nil || tok.AccessToken == "" {
		return "", fmt.Errorf("%s: the answer holds no access token: %w", what, errdefs.ErrSourceRefused)
	}
	t.tok = &oauth2.Token{AccessToken: tok.AccessToken, TokenType: tok.TokenType}
	if tok.ExpiresIn > 0 {
		t.tok.Expiry = time.Now().Add(time.Duration(tok.ExpiresIn) * time.Second)
	}
	return tok.AccessToken, nil
}
