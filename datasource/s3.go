package datasource

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/ini.v1"

	"github.com/diskimport/engine/errdefs"
)

// S3 endpoints. An S3 object is read as an HTTP object (one GET per Open,
// resumed and read at random like any https:// source) through a transport
// that signs every request with AWS Signature Version 4, pins resumed and
// ranged reads with If-Match on the first ETag, and turns S3's XML error
// documents into clear errors:
//
//	s3://bucket/key                  AWS, or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL
//	s3+https://host[:port]/bucket/key   any S3-compatible endpoint, path style
//	s3+http://host[:port]/bucket/key
//	s3+https://bucket.s3.REGION.amazonaws.com/key   virtual-hosted style
//
// A query parameter region=R sets the signing region; a key holding '?',
// '#' or '%' is written percent-encoded. Credentials: the Config's keys,
// the AWS variables, web identity, the shared file, container credentials
// and, when allowed, the instance metadata service (s3creds.go); with none,
// requests go unsigned (a public object). The region is, in order: region=, the amazonaws.com host
// name, AWS_REGION, AWS_DEFAULT_REGION, the shared config file's profile
// (AWS_CONFIG_FILE or ~/.aws/config), then us-east-1.
const (
	s3Scheme      = "s3://"
	s3HTTPScheme  = "s3+http://"
	s3HTTPSScheme = "s3+https://"
)

// NewS3 builds the source of an S3 object (see the endpoint forms above),
// reading the AWS environment variables and shared files of the process.
func NewS3(endpoint string, c Config) (Source, error) {
	return newS3(endpoint, c, os.Getenv)
}

// S3URL rewrites an s3://bucket/key endpoint to address the S3-compatible
// server at base (http(s)://host[:port], path style), with region as its
// signing region when not empty. Other endpoints are returned unchanged
// unless a region is given for an S3 endpoint. It is how the command line's
// --s3-endpoint and --s3-region apply.
func S3URL(endpoint, base, region string) (string, error) {
	if base == "" && region == "" ||
		!hasPrefixFold(endpoint, s3Scheme) && !hasPrefixFold(endpoint, s3HTTPScheme) && !hasPrefixFold(endpoint, s3HTTPSScheme) {
		return endpoint, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("S3 endpoint is not a valid URL: %w", errdefs.ErrInvalidOptions)
	}
	if base != "" && strings.EqualFold(u.Scheme, "s3") {
		b, err := url.Parse(base)
		if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" || b.User != nil {
			return "", fmt.Errorf("S3 endpoint %q is not an http(s)://host[:port] URL: %w", RedactURL(base), errdefs.ErrInvalidOptions)
		}
		// s3://bucket/key: the host is the bucket; path style at base.
		u = &url.URL{Scheme: "s3+" + b.Scheme, Host: b.Host, Path: strings.TrimSuffix(b.Path, "/") + "/" + u.Host + u.Path, RawQuery: u.RawQuery}
	}
	if region != "" {
		q := u.Query()
		q.Set("region", region)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// s3Source is an HTTP source over the signed URL of the object.
type s3Source struct {
	Source // the HTTP source reading the object's URL
	name   string
}

func (s *s3Source) String() string { return s.name }

// Retries reports the HTTP source's retries.
func (s *s3Source) Retries() int { return retries(s.Source) }

// awsHostRe matches the host names of AWS's S3 endpoints and captures a
// virtual-hosted bucket and the region: bucket.s3.us-west-2.amazonaws.com,
// s3-us-west-2.amazonaws.com, s3.amazonaws.com, s3.dualstack.REGION....
var awsHostRe = regexp.MustCompile(`^(?:(.+)\.)?s3(?:[.-]dualstack)?(?:[.-]([a-z0-9-]+))?\.amazonaws\.com(?:\.cn)?$`)

func newS3(endpoint string, c Config, getenv func(string) string) (Source, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint is not a valid URL: %w", errdefs.ErrInvalidOptions)
	}
	if u.User != nil {
		return nil, fmt.Errorf("S3 endpoint %s: credentials do not belong in the URL (use the access key variables or --creds): %w", redactURL(u), errdefs.ErrInvalidOptions)
	}
	q := u.Query()
	region := q.Get("region")
	q.Del("region")
	var obj *url.URL // the object's https URL
	var bucket, key string
	switch strings.ToLower(u.Scheme) {
	case "s3":
		bucket = u.Host
		key = strings.TrimPrefix(u.Path, "/")
		base := getenv("AWS_ENDPOINT_URL_S3")
		if base == "" {
			base = getenv("AWS_ENDPOINT_URL")
		}
		if base != "" {
			b, err := url.Parse(base)
			if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" {
				return nil, fmt.Errorf("AWS endpoint %q is not an http(s)://host[:port] URL: %w", RedactURL(base), errdefs.ErrInvalidOptions)
			}
			obj = &url.URL{Scheme: b.Scheme, Host: b.Host, Path: strings.TrimSuffix(b.Path, "/") + "/" + bucket + "/" + key}
		} else {
			if region == "" {
				region = awsRegion(getenv)
			}
			host := "s3." + region + ".amazonaws.com"
			if dnsBucket(bucket) {
				obj = &url.URL{Scheme: "https", Host: bucket + "." + host, Path: "/" + key}
			} else {
				obj = &url.URL{Scheme: "https", Host: host, Path: "/" + bucket + "/" + key}
			}
		}
	case "s3+http", "s3+https":
		obj = &url.URL{Scheme: strings.TrimPrefix(strings.ToLower(u.Scheme), "s3+"), Host: u.Host, Path: u.Path}
		bucket, key, _ = strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		if m := awsHostRe.FindStringSubmatch(strings.ToLower(u.Hostname())); m != nil {
			if m[1] != "" { // virtual-hosted
				bucket, key = m[1], strings.TrimPrefix(u.Path, "/")
			}
			if region == "" && m[2] != "" && m[2] != "external-1" {
				region = m[2]
			}
		}
	default:
		return nil, fmt.Errorf("S3 endpoint %s: scheme %q is not s3, s3+http or s3+https: %w", redactURL(u), u.Scheme, errdefs.ErrInvalidOptions)
	}
	if bucket == "" || key == "" || strings.HasSuffix(key, "/") {
		return nil, fmt.Errorf("S3 endpoint %s does not name an object (s3://bucket/key): %w", redactURL(u), errdefs.ErrInvalidOptions)
	}
	if len(q) > 0 {
		return nil, fmt.Errorf("S3 endpoint %s: unknown query parameters (only region=; encode '?' in a key as %%3F): %w", redactURL(u), errdefs.ErrInvalidOptions)
	}
	if obj.Host == "" {
		return nil, fmt.Errorf("S3 endpoint %s has no host: %w", redactURL(u), errdefs.ErrInvalidOptions)
	}
	if region == "" {
		region = awsRegion(getenv)
	}
	creds, err := awsCredentials(c, getenv)
	if err != nil {
		return nil, err
	}
	obj.RawPath = s3Escape(obj.Path)
	hc := c
	hc.Username, hc.Password = "", "" // not basic auth: they sign
	base, err := objectStoreTransport(c)
	if err != nil {
		return nil, err
	}
	hc.Transport = &s3Transport{base: base, creds: creds, region: region, object: "s3://" + bucket + "/" + key,
		scope: newCredentialScope(obj, "a signature", c.logger())}
	h, err := NewHTTP(obj.String(), hc)
	if err != nil {
		return nil, err
	}
	name := "s3://" + bucket + "/" + key
	if strings.ToLower(u.Scheme) != "s3" || obj.Host != bucket+".s3."+region+".amazonaws.com" {
		name += " at " + obj.Scheme + "://" + obj.Host
	}
	return &s3Source{Source: h, name: name}, nil
}

// dnsBucket says whether a bucket name can be a virtual-hosted host label
// over https (no dots, which the wildcard certificate would not cover).
func dnsBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 || strings.Contains(b, ".") {
		return false
	}
	for _, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return b[0] != '-' && b[len(b)-1] != '-'
}

func awsProfile(getenv func(string) string) string {
	if p := getenv("AWS_PROFILE"); p != "" {
		return p
	}
	return "default"
}

// awsRegion is the region from the environment or the shared config file,
// else us-east-1.
func awsRegion(getenv func(string) string) string {
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
		if r := getenv(v); r != "" {
			return r
		}
	}
	file := getenv("AWS_CONFIG_FILE")
	if file == "" {
		file = homeFile(getenv, ".aws", "config")
	}
	if file != "" {
		p := awsProfile(getenv)
		if p != "default" {
			p = "profile " + p
		}
		// Key names as written in any case, as the AWS CLI reads them.
		if f, err := ini.LoadSources(ini.LoadOptions{InsensitiveKeys: true}, file); err == nil {
			if sec, err := f.GetSection(p); err == nil && sec.Key("region").String() != "" {
				return sec.Key("region").String()
			}
		}
	}
	return "us-east-1"
}

func homeFile(getenv func(string) string, parts ...string) string {
	home := getenv("HOME")
	if home == "" {
		return ""
	}
	return filepath.Join(append([]string{home}, parts...)...)
}

// s3Transport signs the requests to its endpoint's origin (scope) and reads
// S3's error documents.
type s3Transport struct {
	base   http.RoundTripper
	creds  *s3Credentials
	region string
	scope  *credentialScope
	object string // s3://bucket/key, for messages
}

func (t *s3Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	// A resume or a range read carries If-Range with the first response's
	// ETag; If-Match makes S3 refuse (412) rather than serve another
	// version of the object.
	if ir := r.Header.Get("If-Range"); strings.HasPrefix(ir, `"`) {
		r.Header.Set("If-Match", ir)
	}
	own := t.scope.sameOrigin(r.URL)
	if own {
		// The endpoint's paths are encoded as S3 signs them; a redirect
		// elsewhere is sent as given (it may be pre-signed for its path).
		r.URL.RawPath = s3Escape(r.URL.Path)
	}
	signed := t.creds.signs() && t.scope.allows(r.URL)
	resp, err := t.send(r, signed)
	if err != nil {
		return nil, err
	}
	if !s3Refusal(resp.StatusCode) {
		return s3Answer(resp), nil
	}
	doc := readS3Error(resp)
	var again string
	if signed && t.creds.temporary() && doc.lapsedCredentials() && (r.Body == nil || r.Body == http.NoBody) {
		// Temporary credentials can lapse between their fetch and
		// the server's check (clocks, a renewal due at the edge):
		// fetch them again and send once more. A token that expired
		// too now fails at its provider, which says so.
		t.creds.expire()
		if resp, err = t.send(r, signed); err != nil {
			return nil, err
		}
		if !s3Refusal(resp.StatusCode) {
			return s3Answer(resp), nil
		}
		doc = readS3Error(resp)
		again = fmt.Sprintf(" (signed with %s fetched again after a first refusal)", t.creds.what)
	}
	err = s3ErrorOf(resp, doc, t.object, r.Header.Get("If-Match"))
	if t.creds.signs() && !own {
		return nil, fmt.Errorf("%w (sent unsigned to %s, another origin than the endpoint's, which redirected there)", err, origin(r.URL))
	}
	if again != "" {
		return nil, fmt.Errorf("%w%s", err, again)
	}
	return nil, err
}

// s3Refusal reports whether a status is S3's final no: a 4xx other than
// the throttling and timeout answers the retry loop waits out.
func s3Refusal(code int) bool {
	return code >= 400 && code < 500 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout
}

// s3Answer passes an answer on; every S3 GET serves ranges, advertised or
// not.
func s3Answer(resp *http.Response) *http.Response {
	if resp.StatusCode == http.StatusOK && resp.Header.Get("Accept-Ranges") == "" {
		resp.Header.Set("Accept-Ranges", "bytes")
	}
	return resp
}

// send signs r with the credentials due now, when signed, and sends it.
func (t *s3Transport) send(r *http.Request, signed bool) (*http.Response, error) {
	if signed {
		c, err := t.creds.get(r.Context())
		if err != nil {
			return nil, err
		}
		r = signV4(r, c, t.region)
	}
	return t.base.RoundTrip(r)
}
