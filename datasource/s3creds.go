package datasource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"gopkg.in/ini.v1"

	"github.com/diskimport/engine/errdefs"
)

// S3 credentials, the first source that has them wins:
//
//  1. the Config's Username and Password (CDI's IMPORTER_ACCESS_KEY_ID and
//     IMPORTER_SECRET_KEY, or --creds);
//  2. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN;
//  3. web identity (what EKS's IAM roles for service accounts inject):
//     AWS_WEB_IDENTITY_TOKEN_FILE, with AWS_ROLE_ARN when the STS wants a
//     role (AWS does; MinIO's claim-based policies do not). The token is
//     exchanged with STS AssumeRoleWithWebIdentity at AWS_ENDPOINT_URL_STS,
//     else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com (REGION
//     from the environment or the shared config, never from the import's
//     URL: the token goes only to an STS the pod's own settings name). The
//     file is read again at every exchange, so a rotated token is used;
//  4. the shared credentials file (AWS_SHARED_CREDENTIALS_FILE or
//     ~/.aws/credentials, profile AWS_PROFILE or "default"), read by
//     minio-go's provider: keys, and the profile's credential_process or
//     AWS SSO entries as the AWS CLI reads them;
//  5. container credentials (EKS Pod Identity, ECS):
//     AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (at 169.254.170.2), or
//     AWS_CONTAINER_CREDENTIALS_FULL_URI (https, or http to a loopback
//     address or to 169.254.170.2, 169.254.170.23 or fd00:ec2::23, as the
//     AWS SDKs allow), with the token of AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
//     (read again at every request) or AWS_CONTAINER_AUTHORIZATION_TOKEN;
//  6. the instance metadata service, IMDSv2 only, when Access.MetadataCredentials
//     allows it (at AWS_EC2_METADATA_SERVICE_ENDPOINT, else 169.254.169.254;
//     AWS_EC2_METADATA_DISABLED=true turns it off).
//
// With none, requests go unsigned (a public object). Temporary credentials
// (3 to 6) are cached and fetched again once 80% of their lifetime has
// passed, so a long import signs every request with valid ones. A source
// that is configured but fails (a refused token, an unreachable STS) is an
// error naming it, never a silent fall to the next source. Every request of
// a provider goes through credentialClient: no redirect, the egress policy
// (with only the container and metadata endpoints the environment names
// reachable beyond it, and only by these requests).

// s3Credentials are the signing credentials of an S3 source.
type s3Credentials struct {
	static   awsCreds                 // keys given as they are; used when creds is nil
	creds    *credentials.Credentials // a provider's, cached and renewed before they expire
	client   *http.Client
	what     string // the flow, for messages: "S3 web identity credentials from STS https://…"
	endpoint string // the provider's endpoint, redacted
}

// signs reports whether requests are signed at all.
func (s *s3Credentials) signs() bool { return s.creds != nil || s.static.id != "" }

// temporary reports whether the credentials come from a provider that
// renews them (web identity, container, metadata, credential_process).
func (s *s3Credentials) temporary() bool { return s.creds != nil }

// expire drops the cached credentials, so the next get fetches new ones.
func (s *s3Credentials) expire() {
	if s.creds != nil {
		s.creds.Expire()
	}
}

// get returns the credentials to sign a request with now, fetching them
// when none are cached or the cached ones are due for renewal.
func (s *s3Credentials) get(ctx context.Context) (awsCreds, error) {
	if s.creds == nil {
		return s.static, nil
	}
	var attempt credentialAttempt
	v, err := s.creds.GetWithContext(&credentials.CredContext{Client: s.client, Context: withCredentialAttempt(ctx, &attempt)})
	if err != nil {
		var te *tokenFileError
		if errors.As(err, &te) {
			return awsCreds{}, fmt.Errorf("%s: %w", s.what, te)
		}
		var sts credentials.ErrorResponse
		if errors.As(err, &sts) && sts.STSError.Code != "" {
			// The STS's code says more than its message alone
			// (InvalidIdentityToken, ExpiredTokenException...).
			err = fmt.Errorf("%s: %s", sts.STSError.Code, sts.STSError.Message)
		}
		return awsCreds{}, attempt.classify(s.what, s.endpoint, err)
	}
	if v.AccessKeyID == "" || v.SecretAccessKey == "" {
		return awsCreds{}, fmt.Errorf("%s: the answer holds no access key: %w", s.what, errdefs.ErrSourceRefused)
	}
	return awsCreds{id: v.AccessKeyID, secret: v.SecretAccessKey, token: v.SessionToken}, nil
}

// awsCredentials picks the source of the signing credentials (see above).
func awsCredentials(c Config, getenv func(string) string) (*s3Credentials, error) {
	if c.Username != "" || c.Password != "" {
		if c.Username == "" || c.Password == "" {
			return nil, fmt.Errorf("S3 credentials need both the access key id and the secret key: %w", errdefs.ErrInvalidOptions)
		}
		return &s3Credentials{static: awsCreds{id: c.Username, secret: c.Password}}, nil
	}
	if id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" || secret != "" {
		if id == "" || secret == "" {
			return nil, fmt.Errorf("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together: %w", errdefs.ErrInvalidOptions)
		}
		return &s3Credentials{static: awsCreds{id: id, secret: secret, token: getenv("AWS_SESSION_TOKEN")}}, nil
	}
	if getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "" {
		return webIdentityCredentials(c, getenv)
	}
	if s, err := sharedFileCredentials(c, getenv); s != nil || err != nil {
		return s, err
	}
	if getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != "" || getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "" {
		return containerCredentials(c, getenv)
	}
	if c.MetadataCredentials && !strings.EqualFold(getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		return imdsCredentials(c, getenv)
	}
	return &s3Credentials{}, nil
}

// tokenFileError is a token file that cannot be read: the configuration's
// fault, never retried. It names the variable and the file, never the
// content.
type tokenFileError struct {
	variable, file string
	err            error
}

func (e *tokenFileError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.variable, e.file, e.err)
}

func (e *tokenFileError) Unwrap() []error { return []error{errdefs.ErrInvalidOptions, e.err} }

// readTokenFile reads a token file (a projected ServiceAccount token, a
// container authorization token) as it is now.
func readTokenFile(variable, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in the message already
		}
		return "", &tokenFileError{variable: variable, file: file, err: err}
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", &tokenFileError{variable: variable, file: file, err: errors.New("the file is empty")}
	}
	return tok, nil
}

// regionRe is what a region name can be; the region becomes part of a
// host name.
var regionRe = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)

// stsEndpoint is the STS that web identity tokens are exchanged with.
func stsEndpoint(getenv func(string) string) (string, error) {
	for _, v := range []string{"AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"} {
		if e := getenv(v); e != "" {
			u, err := url.Parse(e)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				return "", fmt.Errorf("%s %q is not an http(s)://host[:port] URL: %w", v, RedactURL(e), errdefs.ErrInvalidOptions)
			}
			return e, nil
		}
	}
	region := awsRegion(getenv)
	if !regionRe.MatchString(region) {
		return "", fmt.Errorf("AWS region %q is not a region name: %w", region, errdefs.ErrInvalidOptions)
	}
	if strings.HasPrefix(region, "cn-") {
		return "https://sts." + region + ".amazonaws.com.cn", nil
	}
	return "https://sts." + region + ".amazonaws.com", nil
}

func webIdentityCredentials(c Config, getenv func(string) string) (*s3Credentials, error) {
	file := getenv("AWS_WEB_IDENTITY_TOKEN_FILE")
	// Read now, so that a missing file fails as an option before anything
	// is opened; read again at every exchange.
	if _, err := readTokenFile("AWS_WEB_IDENTITY_TOKEN_FILE", file); err != nil {
		return nil, fmt.Errorf("S3 web identity credentials: %w", err)
	}
	endpoint, err := stsEndpoint(getenv)
	if err != nil {
		return nil, err
	}
	client, err := credentialClient(c, nil)
	if err != nil {
		return nil, err
	}
	p := &credentials.STSWebIdentity{
		Client:      client,
		STSEndpoint: endpoint,
		RoleARN:     getenv("AWS_ROLE_ARN"),
		GetWebIDTokenExpiry: func() (*credentials.WebIdentityToken, error) {
			tok, err := readTokenFile("AWS_WEB_IDENTITY_TOKEN_FILE", file)
			if err != nil {
				return nil, err
			}
			return &credentials.WebIdentityToken{Token: tok}, nil
		},
	}
	return &s3Credentials{creds: credentials.New(p), client: client, endpoint: RedactURL(endpoint),
		what: "S3 web identity credentials (AWS_WEB_IDENTITY_TOKEN_FILE) from STS " + RedactURL(endpoint)}, nil
}

// sharedFileCredentials reads the profile of the shared credentials file
// with minio-go's provider; nil, nil when there is no file, or no
// [default] section in it, or no keys in the profile (the next source is
// asked). A profile named by AWS_PROFILE that is not in the file is an
// error.
func sharedFileCredentials(c Config, getenv func(string) string) (*s3Credentials, error) {
	file := getenv("AWS_SHARED_CREDENTIALS_FILE")
	if file == "" {
		file = homeFile(getenv, ".aws", "credentials")
	}
	if file == "" {
		return nil, nil
	}
	profile := awsProfile(getenv)
	// Key names in any case, as the AWS CLI reads them (minio-go's
	// provider reads them as written).
	f, err := ini.LoadSources(ini.LoadOptions{InsensitiveKeys: true}, file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the AWS shared credentials file %s: %w: %w", file, errdefs.ErrInvalidOptions, err)
	}
	if !f.HasSection(profile) && !f.HasSection("profile "+profile) {
		if profile == "default" {
			return nil, nil
		}
		return nil, fmt.Errorf("AWS shared credentials file %s has no profile %s (AWS_PROFILE): %w", file, profile, errdefs.ErrInvalidOptions)
	}
	client, err := credentialClient(c, nil)
	if err != nil {
		return nil, err
	}
	p := &credentials.FileAWSCredentials{Filename: file, Profile: profile}
	what := "S3 credentials of " + file + ", profile " + profile
	v, err := p.RetrieveWithCredContext(&credentials.CredContext{Client: client, Context: context.Background()})
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", what, errdefs.ErrInvalidOptions, scrubTokens(redactErrorURLs(err).Error()))
	}
	if v.AccessKeyID == "" && v.SecretAccessKey == "" {
		sec, err := f.GetSection(profile)
		if err != nil {
			sec, _ = f.GetSection("profile " + profile)
		}
		if sec != nil {
			v.AccessKeyID, v.SecretAccessKey = sec.Key("aws_access_key_id").String(), sec.Key("aws_secret_access_key").String()
			v.SessionToken = sec.Key("aws_session_token").String()
			if (v.AccessKeyID == "") != (v.SecretAccessKey == "") {
				return nil, fmt.Errorf("%s: aws_access_key_id and aws_secret_access_key must be set together: %w", what, errdefs.ErrInvalidOptions)
			}
		}
	}
	switch {
	case v.AccessKeyID == "" && v.SecretAccessKey == "":
		return nil, nil
	case v.Expiration.IsZero(): // keys as they are
		return &s3Credentials{static: awsCreds{id: v.AccessKeyID, secret: v.SecretAccessKey, token: v.SessionToken}}, nil
	}
	// A credential_process or SSO profile: temporary, fetched again.
	return &s3Credentials{creds: credentials.New(p), client: client, what: what, endpoint: file}, nil
}

// containerCredentialHosts are the addresses AWS SDKs let a plain-http
// container credentials endpoint have besides loopback: ECS's and EKS Pod
// Identity's agents.
var containerCredentialHosts = []netip.Addr{
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("169.254.170.23"),
	netip.MustParseAddr("fd00:ec2::23"),
}

func containerCredentials(c Config, getenv func(string) string) (*s3Credentials, error) {
	endpoint := getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")
	variable := "AWS_CONTAINER_CREDENTIALS_FULL_URI"
	if rel := getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); rel != "" {
		endpoint, variable = "http://169.254.170.2"+rel, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%s %q is not an http(s) URL: %w", variable, RedactURL(endpoint), errdefs.ErrInvalidOptions)
	}
	addr, literal := credentialEndpointAddr(endpoint)
	if u.Scheme == "http" && !(literal && (addr.IsLoopback() || containerCredentialHosts[0] == addr || containerCredentialHosts[1] == addr || containerCredentialHosts[2] == addr)) &&
		u.Hostname() != "localhost" {
		return nil, fmt.Errorf("%s %s: plain http is only for a loopback address or the ECS and EKS Pod Identity agents (169.254.170.2, 169.254.170.23, fd00:ec2::23): %w",
			variable, RedactURL(endpoint), errdefs.ErrInvalidOptions)
	}
	p := &containerProvider{endpoint: endpoint, token: getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN"), tokenFile: getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")}
	if p.tokenFile != "" {
		if _, err := readTokenFile("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", p.tokenFile); err != nil {
			return nil, fmt.Errorf("S3 container credentials: %w", err)
		}
	}
	var exempt []netip.Addr
	if literal {
		exempt = append(exempt, addr)
	}
	client, err := credentialClient(c, exempt)
	if err != nil {
		return nil, err
	}
	return &s3Credentials{creds: credentials.New(p), client: client, endpoint: RedactURL(endpoint),
		what: "S3 container credentials (" + variable + ") from " + RedactURL(endpoint)}, nil
}

// imdsEndpoints are the instance metadata service's addresses.
var imdsEndpoints = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

func imdsCredentials(c Config, getenv func(string) string) (*s3Credentials, error) {
	endpoint := getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT")
	if endpoint == "" {
		endpoint = "http://169.254.169.254"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("AWS_EC2_METADATA_SERVICE_ENDPOINT %q is not an http(s) URL: %w", RedactURL(endpoint), errdefs.ErrInvalidOptions)
	}
	exempt := imdsEndpoints
	if a, ok := credentialEndpointAddr(endpoint); ok {
		exempt = append([]netip.Addr{a}, exempt...)
	}
	client, err := credentialClient(c, exempt)
	if err != nil {
		return nil, err
	}
	p := &imdsProvider{endpoint: strings.TrimSuffix(endpoint, "/")}
	return &s3Credentials{creds: credentials.New(p), client: client, endpoint: RedactURL(endpoint),
		what: "S3 credentials from the instance metadata service " + RedactURL(endpoint)}, nil
}
