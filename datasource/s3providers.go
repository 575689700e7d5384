package datasource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Two credential providers of our own beside minio-go's, in its Provider
// shape so that its Credentials caches and renews them: minio-go's IAM
// provider reads the container variables from the process environment
// itself, never uses a configured AuthorizationTokenFile (v7.4.1 falls back
// to the token instead), and falls back to IMDSv1 when the IMDSv2 token
// request times out; these take what awsCredentials picked and speak
// IMDSv2 only.

// awsRoleCredentials is the JSON the container endpoint and the metadata
// service answer with.
type awsRoleCredentials struct {
	AccessKeyID     string    `json:"AccessKeyId"`
	SecretAccessKey string    `json:"SecretAccessKey"`
	Token           string    `json:"Token"`
	Expiration      time.Time `json:"Expiration"`
	Code            string    `json:"Code"`
	Message         string    `json:"Message"`
}

// value checks the answer and sets e's expiry (renewal at 80% of the
// lifetime).
func (r awsRoleCredentials) value(e *credentials.Expiry) (credentials.Value, error) {
	if r.AccessKeyID == "" || r.SecretAccessKey == "" {
		return credentials.Value{}, errors.New("the answer holds no access key")
	}
	if !r.Expiration.IsZero() {
		e.SetExpiration(r.Expiration, credentials.DefaultExpiryWindow)
	} else {
		e.SetExpiration(time.Now().Add(time.Hour), credentials.DefaultExpiryWindow)
	}
	return credentials.Value{AccessKeyID: r.AccessKeyID, SecretAccessKey: r.SecretAccessKey, SessionToken: r.Token,
		Expiration: r.Expiration, SignerType: credentials.SignatureV4}, nil
}

// getJSON sends r and decodes a 200's JSON answer into v; another status
// is an error with the answer's message (the status itself is recorded by
// the credential client).
func getJSON(client *http.Client, r *http.Request, v any) error {
	resp, err := client.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &e) == nil && (e.Code != "" || e.Message != "") {
			return fmt.Errorf("%s: %s: %s", resp.Status, e.Code, e.Message)
		}
		return errors.New(resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the answer is not credentials JSON: %w", err)
	}
	return nil
}

// containerProvider gets credentials from the ECS or EKS Pod Identity
// agent: GET the endpoint with the authorization token (read from its file
// at every request, as the agent's projected token rotates).
type containerProvider struct {
	credentials.Expiry
	endpoint  string
	token     string
	tokenFile string
}

func (p *containerProvider) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	token := p.token
	if p.tokenFile != "" {
		var err error
		if token, err = readTokenFile("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", p.tokenFile); err != nil {
			return credentials.Value{}, err
		}
	}
	ctx := cc.Context
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, p.endpoint, nil)
	if err != nil {
		return credentials.Value{}, err
	}
	if token != "" {
		r.Header.Set("Authorization", token)
	}
	var rc awsRoleCredentials
	if err := getJSON(cc.Client, r, &rc); err != nil {
		return credentials.Value{}, err
	}
	return rc.value(&p.Expiry)
}

func (p *containerProvider) Retrieve() (credentials.Value, error) {
	return credentials.Value{}, errors.New("container credentials need a credential context")
}

// imdsProvider gets the instance role's credentials from the instance
// metadata service with IMDSv2: a session token (PUT /latest/api/token),
// then the role's name and its credentials, each with the token.
type imdsProvider struct {
	credentials.Expiry
	endpoint string
}

const imdsCredsPath = "/latest/meta-data/iam/security-credentials/"

func (p *imdsProvider) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	ctx := cc.Context
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPut, p.endpoint+"/latest/api/token", nil)
	if err != nil {
		return credentials.Value{}, err
	}
	r.Header.Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
	token, err := getText(cc.Client, r)
	if err != nil {
		return credentials.Value{}, fmt.Errorf("IMDSv2 session token: %w", err)
	}
	get := func(path string) (*http.Request, error) {
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, p.endpoint+path, nil)
		if err == nil {
			r.Header.Set("X-Aws-Ec2-Metadata-Token", token)
		}
		return r, err
	}
	if r, err = get(imdsCredsPath); err != nil {
		return credentials.Value{}, err
	}
	roles, err := getText(cc.Client, r)
	if err != nil {
		return credentials.Value{}, fmt.Errorf("the instance's role: %w", err)
	}
	role, _, _ := strings.Cut(strings.TrimSpace(roles), "\n")
	if role == "" {
		return credentials.Value{}, errors.New("no IAM role is attached to the instance")
	}
	if r, err = get(imdsCredsPath + role); err != nil {
		return credentials.Value{}, err
	}
	var rc awsRoleCredentials
	if err := getJSON(cc.Client, r, &rc); err != nil {
		return credentials.Value{}, err
	}
	if rc.Code != "" && rc.Code != "Success" {
		return credentials.Value{}, fmt.Errorf("%s: %s", rc.Code, rc.Message)
	}
	return rc.value(&p.Expiry)
}

func (p *imdsProvider) Retrieve() (credentials.Value, error) {
	return credentials.Value{}, errors.New("metadata credentials need a credential context")
}

// getText sends r and returns a 200's body as text.
func getText(client *http.Client, r *http.Request) (string, error) {
	resp, err := client.Do(r)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return string(body), nil
}
