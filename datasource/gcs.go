package datasource

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/diskimport/engine/errdefs"
)

// GCS endpoints. A Google Cloud Storage object is read as an HTTP object
// through the JSON API's media download URL (one GET per Open, resumed and
// read at random like any https:// source), through a transport that adds
// an OAuth2 access token, pins resumed and ranged reads to the first
// response's generation (ifGenerationMatch, and the generation and ETag of
// every answer checked), and turns GCS's errors into clear ones:
//
//	gs://bucket/object                          storage.googleapis.com, or STORAGE_EMULATOR_HOST
//	gs+https://storage.googleapis.com/bucket/object   any endpoint serving the XML API paths
//	gs+http://host[:port]/bucket/object
//
// Credentials are Application Default Credentials: the file named by
// GOOGLE_APPLICATION_CREDENTIALS (as CDI mounts a service-account key), of
// type service_account, authorized_user or external_account (workload
// identity federation with a subject token from a file); else gcloud's
// application_default_credentials.json (CLOUDSDK_CONFIG, else
// ~/.config/gcloud); else, only with Access.MetadataCredentials, the
// metadata server (GKE, GCE). Without any, requests are anonymous (a public
// object).
const (
	gcsScheme      = "gs://"
	gcsHTTPScheme  = "gs+http://"
	gcsHTTPSScheme = "gs+https://"
	gcsDefaultHost = "storage.googleapis.com"
)

// NewGCS builds the source of a GCS object (see the endpoint forms above),
// reading GOOGLE_APPLICATION_CREDENTIALS and STORAGE_EMULATOR_HOST of the
// process.
func NewGCS(endpoint string, c Config) (Source, error) { return newGCS(endpoint, c, os.Getenv) }

// GCSURL rewrites a gs://bucket/object endpoint to address the server at
// base (http(s)://host[:port]); other endpoints are returned unchanged. It
// is how the command line's --gcs-endpoint applies.
func GCSURL(endpoint, base string) (string, error) {
	if base == "" || !hasPrefixFold(endpoint, gcsScheme) {
		return endpoint, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("GCS endpoint is not a valid URL: %w", errdefs.ErrInvalidOptions)
	}
	b, err := url.Parse(base)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" || b.User != nil {
		return "", fmt.Errorf("GCS endpoint %q is not an http(s)://host[:port] URL: %w", RedactURL(base), errdefs.ErrInvalidOptions)
	}
	return (&url.URL{Scheme: "gs+" + b.Scheme, Host: b.Host, Path: strings.TrimSuffix(b.Path, "/") + "/" + u.Host + u.Path}).String(), nil
}

type gcsSource struct {
	Source
	name string
}

func (s *gcsSource) String() string { return s.name }

// Retries reports the HTTP source's retries.
func (s *gcsSource) Retries() int { return retries(s.Source) }

func newGCS(endpoint string, c Config, getenv func(string) string) (Source, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("GCS endpoint is not a valid URL: %w", errdefs.ErrInvalidOptions)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("GCS endpoint %s: no credentials, query or fragment belong in it (encode '?' and '#' in an object name): %w", redactURL(u), errdefs.ErrInvalidOptions)
	}
	var obj *url.URL
	var bucket, object string
	switch strings.ToLower(u.Scheme) {
	case "gs":
		bucket, object = u.Host, strings.TrimPrefix(u.Path, "/")
		scheme, host := "https", gcsDefaultHost
		if e := getenv("STORAGE_EMULATOR_HOST"); e != "" {
			scheme, host = "http", e
			if s, h, ok := strings.Cut(e, "://"); ok {
				scheme, host = s, strings.TrimSuffix(h, "/")
			}
		}
		obj = &url.URL{Scheme: scheme, Host: host}
	case "gs+http", "gs+https":
		bucket, object, _ = strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		obj = &url.URL{Scheme: strings.TrimPrefix(strings.ToLower(u.Scheme), "gs+"), Host: u.Host}
	default:
		return nil, fmt.Errorf("GCS endpoint %s: scheme %q is not gs, gs+http or gs+https: %w", redactURL(u), u.Scheme, errdefs.ErrInvalidOptions)
	}
	if bucket == "" || object == "" || strings.HasSuffix(object, "/") || obj.Host == "" {
		return nil, fmt.Errorf("GCS endpoint %s does not name an object (gs://bucket/object): %w", redactURL(u), errdefs.ErrInvalidOptions)
	}
	name := "gs://" + bucket + "/" + object
	tokens, endpoints, err := gcsCredentials(c, getenv)
	if err != nil {
		return nil, err
	}
	base, err := objectStoreTransport(c)
	if err != nil {
		return nil, err
	}
	if tokens != nil {
		client, err := credentialClient(c, endpoints)
		if err != nil {
			return nil, err
		}
		tokens.base, tokens.ua = client.Transport, c.UserAgent
	}
	// The JSON API's media download: the same object and headers as the
	// XML API's https://host/bucket/object, and served by emulators whatever
	// Host a request names. The object name is one path segment.
	obj.Path = "/download/storage/v1/b/" + bucket + "/o/" + object
	obj.RawPath = "/download/storage/v1/b/" + awsEscape(bucket, true) + "/o/" + awsEscape(object, true)
	obj.RawQuery = "alt=media"
	hc := c
	hc.Username, hc.Password = "", ""
	hc.Transport = &gcsTransport{base: base, tokens: tokens, object: name, scope: newCredentialScope(obj, "the access token", c.logger())}
	h, err := NewHTTP(obj.String(), hc)
	if err != nil {
		return nil, err
	}
	if obj.Host != gcsDefaultHost {
		name += " at " + obj.Scheme + "://" + obj.Host
	}
	return &gcsSource{Source: h, name: name}, nil
}

// gcsTransport authorizes the requests to its endpoint's origin (scope) and
// pins the object's generation.
type gcsTransport struct {
	base   http.RoundTripper
	tokens *gcsTokens // nil: anonymous
	scope  *credentialScope
	object string // gs://bucket/object, for messages

	mu         sync.Mutex
	generation string // of the first response
	etag       string
}

func (t *gcsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if t.tokens != nil && t.scope.allows(r.URL) {
		tok, err := t.tokens.token(r.Context())
		if err != nil {
			return nil, err
		}
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	t.mu.Lock()
	gen, etag := t.generation, t.etag
	t.mu.Unlock()
	// A resume or a range read (If-Range set) must read the generation the
	// first response served.
	pinned := r.Header.Get("If-Range") != ""
	if pinned && gen != "" {
		q := r.URL.Query()
		q.Set("ifGenerationMatch", gen)
		r.URL.RawQuery = q.Encode()
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent:
		g, e := resp.Header.Get("X-Goog-Generation"), resp.Header.Get("ETag")
		if pinned && (g != "" && gen != "" && g != gen || g == "" && e != "" && etag != "" && e != etag) {
			resp.Body.Close()
			return nil, fmt.Errorf("GCS %s: the object was replaced during the import (generation %s, ETag %s; was %s, %s): %w",
				t.object, g, e, gen, etag, &errdefs.HTTPStatusError{URL: t.object, StatusCode: http.StatusPreconditionFailed, Status: "412 Precondition Failed"})
		}
		if !pinned && resp.StatusCode == http.StatusOK {
			// A fresh GET (a new Open) pins what it got.
			t.mu.Lock()
			t.generation, t.etag = g, e
			t.mu.Unlock()
			if resp.Header.Get("Accept-Ranges") == "" {
				resp.Header.Set("Accept-Ranges", "bytes")
			}
		}
	case resp.StatusCode == http.StatusPreconditionFailed && pinned:
		resp.Body.Close()
		return nil, fmt.Errorf("GCS %s: the object was replaced during the import (its generation is no longer %s): %w",
			t.object, gen, &errdefs.HTTPStatusError{URL: t.object, StatusCode: resp.StatusCode, Status: resp.Status})
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout:
		return nil, gcsError(resp, t.object)
	}
	return resp, nil
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

// gcsCredentials picks the Application Default Credentials (see above):
// nil for anonymous requests, and the addresses their requests may reach
// past the egress policy (the metadata server's).
func gcsCredentials(c Config, getenv func(string) string) (*gcsTokens, []netip.Addr, error) {
	if file := getenv("GOOGLE_APPLICATION_CREDENTIALS"); file != "" {
		t, err := loadGCSCredentials(file)
		return t, nil, err
	}
	dir := getenv("CLOUDSDK_CONFIG")
	if dir == "" {
		dir = homeFile(getenv, ".config", "gcloud")
	}
	if dir != "" {
		file := filepath.Join(dir, "application_default_credentials.json")
		if _, err := os.Stat(file); err == nil {
			t, err := loadGCSCredentials(file)
			return t, nil, err
		}
	}
	if c.MetadataCredentials {
		return gcsMetadataTokens(), gcsMetadataEndpoints(), nil
	}
	return nil, nil, nil
}
