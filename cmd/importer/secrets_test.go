package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/objtest"
	"github.com/diskimport/engine/internal/testkit/regtest"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// Secrets of TestNoSecretInAnyOutput, each unlike anything else an import
// prints. The redirect's own pre-signed query (redirectSig) is a secret of
// the second host.
const (
	basicUser   = "ba5icUser0001"
	basicPass   = "ba5icPa55w0rd0001"
	urlPass     = "urlPa55w0rd0001"
	headerValue = "hdr5ecretVa1ue0001"
	amzSig      = "amzS1gnature0001"
	amzCred     = "amzCred3ntial0001"
	amzToken    = "amzSecur1tyT0ken0001"
	googSig     = "googS1gnature0001"
	sasSig      = "sasS1gnature0001"
	queryToken  = "queryT0ken0001"
	queryHMAC   = "queryHm4c0001"
	redirectSig = "red1rectS1gnature0001"
	s3KeyID     = "AKIA5ECRETKEY0001"
	s3Secret    = "s3cretAccessKey0001"
	s3Session   = "s3ssionT0ken0001"
	s3Wrong     = "wr0ngS3cretKey0001"
	gcsToken    = "ya29.gcsAccessT0ken0001"
	gcsClient   = "gcsCl1entSecret0001"
	gcsRefresh  = "gcsRefreshT0ken0001"
	stsSecret   = "st5SecretKey0001"        // the STS's answer
	podSecret   = "p0dIdent1tySecret0001"   // the container agent's answer
	imdsSecret  = "1mdsSecretKey0001"       // the instance metadata service's answer
	imdsToken   = "1mdsApiT0ken0001"        // IMDSv2's session token
	gcsFederat  = "ya29.f3deratedT0ken0001" // the token exchange's answer
	gcsImperson = "ya29.1mpersonatedT0ken0001"
	gcsMetaTok  = "ya29.metad4taT0ken0001" // the GKE metadata server's answer
	regUser     = "regUser0001"
	regPass     = "regPa55w0rd0001"
	regWrong    = "regWr0ngPa55w0rd0001"
)

// presignedQuery is the query of a pre-signed URL, in the forms of S3,
// GCS, Azure SAS, a plain token and a name that says nothing (hmac).
const presignedQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + amzCred + "&X-Amz-Security-Token=" + amzToken +
	"&X-Amz-Signature=" + amzSig + "&X-Goog-Signature=" + googSig + "&sig=" + sasSig + "&token=" + queryToken + "&hmac=" + queryHMAC

// TestNoSecretInAnyOutput runs succeeding and failing imports of every
// network source (HTTP with basic auth, extra headers and a pre-signed
// query, redirected to another host with one of its own; S3 with keys and a
// session token, web identity, container and metadata credentials; GCS
// with a service-account key, an authorized user, an external account and
// the metadata server; a registry with a password), on the command line (and inspect) and in
// CDI's env mode, with debug logs and the result JSON, and looks for every
// secret in standard output, standard error and the termination log.
func TestNoSecretInAnyOutput(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 61)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	want := testimg.Digest(t, raw, -1)

	// The second host: the image behind a pre-signed query of its own, or
	// a refusal.
	blob := testimg.ServerOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sig") != redirectSig || r.URL.Path == "/denied" {
			http.Error(w, "signature mismatch", http.StatusForbidden)
			return
		}
		serveData(data)(w, r)
	}))
	// The first host checks everything it was given and redirects.
	front := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		q := r.URL.Query()
		if (u != basicUser || p != basicPass) && p != urlPass || r.Header.Get("X-Auth-Token") != headerValue || q.Get("X-Amz-Signature") != amzSig {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/ok.img":
			http.Redirect(w, r, blob.URL+"/disk.img?sig="+redirectSig, http.StatusFound)
		case "/denied.img":
			http.Redirect(w, r, blob.URL+"/denied?sig="+redirectSig, http.StatusFound)
		case "/broken.img":
			http.Error(w, "try later", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	// An S3 endpoint that takes the session token and redirects to the
	// second host (the object's signed bytes elsewhere).
	s3front := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Security-Token") != s3Session || !strings.Contains(r.Header.Get("Authorization"), s3KeyID) {
			http.Error(w, "<Error><Code>InvalidAccessKeyId</Code></Error>", http.StatusForbidden)
			return
		}
		http.Redirect(w, r, blob.URL+"/disk.img?sig="+redirectSig, http.StatusTemporaryRedirect)
	}))
	s3 := objtest.StartS3(t)
	s3.MakeBucket(t, "bucket")
	s3.Put(t, "bucket", "disk.img", data)
	gcs := objtest.StartGCS(t, "bucket")
	gcs.Upload(t, "bucket", "disk.img", data)
	tokens := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.PostForm.Get("grant_type") == "refresh_token" { // the authorized user is refused
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":"invalid_grant","error_description":"Token has been expired or revoked."}`)
			return
		}
		_, _ = io.WriteString(w, `{"access_token":"`+gcsToken+`","expires_in":3600,"token_type":"Bearer"}`)
	}))
	serviceKey, pemBody := gcsServiceAccountFile(t, tokens.URL)
	userKey := gcsAuthorizedUserFile(t, tokens.URL)
	cloud := startCloudIdentity(t)
	reg := regtest.Start(t, regtest.Options{User: regUser, Pass: regPass})
	img := regtest.Image(t, regtest.Config{}, regtest.Layer(t, regtest.Gzip, regtest.File{Name: "disk/disk.img", Path: raw}))
	ref := "docker://" + reg.Push(t, "cd/disk:v1", img, nil)
	regConf, regAuth := regtest.Hermetic(t)
	// A registry whose blobs are redirected to a pre-signed URL on a host
	// that does not answer.
	regProxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Host})
	redirReg := testimg.ServerOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			http.Redirect(w, r, "http://"+closedPort(t)+"/blob?sig="+redirectSig, http.StatusTemporaryRedirect)
			return
		}
		regProxy.ServeHTTP(w, r)
	}))
	redirRef := "docker://" + strings.TrimPrefix(redirReg.URL, "http://") + "/cd/disk:v1"

	secrets := []string{basicPass, urlPass, headerValue, amzSig, amzCred, amzToken, googSig, sasSig, queryToken, queryHMAC, redirectSig,
		s3Secret, s3Session, s3Wrong, s3.Secret, gcsToken, gcsClient, gcsRefresh, pemBody, regPass, regWrong,
		"Bearer ", "AWS4-HMAC-SHA256 Credential"}
	secrets = append(secrets, cloud.secrets...)
	t.Setenv("AWS_ACCESS_KEY_ID", s3KeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3Secret)
	t.Setenv("AWS_SESSION_TOKEN", s3Session)
	for _, v := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "STORAGE_EMULATOR_HOST", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ENDPOINT_URL_STS", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT", "GCE_METADATA_HOST"} {
		t.Setenv(v, "")
	}
	t.Setenv("CLOUDSDK_CONFIG", t.TempDir())

	presigned := func(path string) string { return front.URL + path + "?" + presignedQuery }
	withUser := func(path string) string {
		return "http://u:" + urlPass + "@" + strings.TrimPrefix(front.URL, "http://") + path + "?" + presignedQuery
	}
	httpFlags := []string{"--creds", basicUser + ":" + basicPass, "--header", "X-Auth-Token: " + headerValue}
	retryFlags := []string{"--retries", "1", "--retry-max-elapsed", "1s"}
	regFlags := []string{"--insecure-tls", "--registries-conf", regConf, "--auth-file", regAuth, "--arch", "amd64"}
	closed := closedPort(t)

	type importCase struct {
		name string
		ok   bool
		gcs  string // GOOGLE_APPLICATION_CREDENTIALS
		// cloud sets the process's variables of a cloud identity flow
		// (web identity, container credentials, the metadata hosts), the
		// AWS keys unset.
		cloud map[string]string
		args  []string          // command line (SOURCE last)
		env   map[string]string // or CDI's env mode
		// inspect runs importer inspect --json SOURCE instead.
		inspect bool
	}
	cases := []importCase{
		{name: "cli http", ok: true, args: append(httpFlags, presigned("/ok.img"))},
		{name: "cli http user in url", ok: true, args: []string{"--header", "X-Auth-Token: " + headerValue, withUser("/ok.img")}},
		{name: "cli http redirect refused", args: append(httpFlags, presigned("/denied.img"))},
		{name: "cli http redirect refused, json logs", args: append(append(httpFlags, "--log-format", "json"), presigned("/denied.img"))},
		{name: "cli http not found", args: append(httpFlags, presigned("/missing.img"))},
		{name: "cli http unavailable", args: append(append(httpFlags, retryFlags...), presigned("/broken.img"))},
		{name: "cli http unreachable", args: append(append(httpFlags, retryFlags...), "http://u:"+urlPass+"@"+closed+"/disk.img?"+presignedQuery)},
		{name: "cli http bad url", args: append(httpFlags, "http://u:"+urlPass+"@127.0.0.1:99999999/disk.img?"+presignedQuery)},
		{name: "cli inspect http", ok: true, inspect: true, args: append(httpFlags, presigned("/ok.img"))},
		{name: "cli inspect http refused", inspect: true, args: append(httpFlags, presigned("/denied.img"))},
		{name: "cli unsupported scheme", args: []string{"ftp://u:" + urlPass + "@127.0.0.1/disk.img?" + presignedQuery}},
		{name: "cli s3 session token redirected", ok: true, args: []string{"s3+" + s3front.URL + "/bucket/disk.img"}},
		{name: "cli s3", ok: true, args: []string{"--creds", s3.Access + ":" + s3.Secret, "--s3-endpoint", s3.URL, "s3://bucket/disk.img"}},
		{name: "cli s3 wrong secret", args: []string{"--creds", s3.Access + ":" + s3Wrong, "--s3-endpoint", s3.URL, "s3://bucket/disk.img"}},
		{name: "cli s3 unknown key and session token", args: []string{"--s3-endpoint", s3.URL, "s3://bucket/disk.img"}},
		{name: "cli gcs service account", ok: true, gcs: serviceKey, args: []string{"--gcs-endpoint", gcs.URL, "gs://bucket/disk.img"}},
		{name: "cli gcs missing object", gcs: serviceKey, args: []string{"--gcs-endpoint", gcs.URL, "gs://bucket/missing.img"}},
		{name: "cli gcs authorized user refused", gcs: userKey, args: []string{"--gcs-endpoint", gcs.URL, "gs://bucket/disk.img"}},
		{name: "cli s3 web identity", ok: true, cloud: cloud.webIdentity(true), args: []string{"s3+" + s3front.URL + "/bucket/disk.img"}},
		{name: "cli s3 web identity refused", cloud: cloud.webIdentity(false), args: []string{"--s3-endpoint", s3.URL, "s3://bucket/disk.img"}},
		{name: "cli s3 container credentials", ok: true, cloud: cloud.container(true), args: []string{"s3+" + s3front.URL + "/bucket/disk.img"}},
		{name: "cli s3 container credentials refused", cloud: cloud.container(false), args: []string{"--s3-endpoint", s3.URL, "s3://bucket/disk.img"}},
		{name: "cli s3 metadata credentials", ok: true, cloud: cloud.imds(), args: []string{"--metadata-credentials", "s3+" + s3front.URL + "/bucket/disk.img"}},
		{name: "cli gcs external account", ok: true, gcs: cloud.wifFile(true, true), cloud: map[string]string{}, args: []string{"--gcs-endpoint", gcs.URL, "gs://bucket/disk.img"}},
		{name: "cli gcs external account refused", gcs: cloud.wifFile(false, false), cloud: map[string]string{}, args: []string{"--gcs-endpoint", gcs.URL, "gs://bucket/disk.img"}},
		{name: "cli gcs metadata server", ok: true, cloud: cloud.gceMetadata(), args: []string{"--metadata-credentials", "--gcs-endpoint", gcs.URL, "gs://bucket/disk.img"}},
		{name: "cli registry", ok: true, args: append(append(regFlags, "--creds", regUser+":"+regPass), ref)},
		{name: "cli registry blob redirected to a dead host", args: append(append(regFlags, "--creds", regUser+":"+regPass), redirRef)},
		{name: "cli registry wrong password", args: append(append(regFlags, "--creds", regUser+":"+regWrong), ref)},

		{name: "env http", ok: true, env: map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": presigned("/ok.img"),
			"IMPORTER_ACCESS_KEY_ID": basicUser, "IMPORTER_SECRET_KEY": basicPass, "IMPORTER_EXTRA_HEADER_0": "X-Auth-Token: " + headerValue}},
		{name: "env http redirect refused", env: map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": presigned("/denied.img"),
			"IMPORTER_ACCESS_KEY_ID": basicUser, "IMPORTER_SECRET_KEY": basicPass, "IMPORTER_EXTRA_HEADER_0": "X-Auth-Token: " + headerValue}},
		{name: "env http bad url", env: map[string]string{"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": "http://u:" + urlPass + "@bad host/x?" + presignedQuery}},
		{name: "env s3", ok: true, env: map[string]string{"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": s3.URL + "/bucket/disk.img",
			"IMPORTER_ACCESS_KEY_ID": s3.Access, "IMPORTER_SECRET_KEY": s3.Secret}},
		{name: "env s3 wrong secret", env: map[string]string{"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": s3.URL + "/bucket/disk.img",
			"IMPORTER_ACCESS_KEY_ID": s3.Access, "IMPORTER_SECRET_KEY": s3Wrong}},
		{name: "env s3 bad endpoint", env: map[string]string{"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": "ftp://u:" + urlPass + "@h/b/k?" + presignedQuery}},
		{name: "env gcs", ok: true, gcs: serviceKey, env: map[string]string{"IMPORTER_SOURCE": "gcs", "IMPORTER_ENDPOINT": gcs.URL + "/bucket/disk.img"}},
		{name: "env gcs refused", gcs: userKey, env: map[string]string{"IMPORTER_SOURCE": "gcs", "IMPORTER_ENDPOINT": gcs.URL + "/bucket/disk.img"}},
		{name: "env s3 web identity", ok: true, cloud: cloud.webIdentity(true), env: map[string]string{"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": s3front.URL + "/bucket/disk.img"}},
		{name: "env s3 web identity refused", cloud: cloud.webIdentity(false), env: map[string]string{"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": s3.URL + "/bucket/disk.img"}},
		{name: "env s3 container credentials refused", cloud: cloud.container(false), env: map[string]string{"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": s3.URL + "/bucket/disk.img"}},
		{name: "env s3 metadata credentials", ok: true, cloud: cloud.imds(), env: map[string]string{"IMPORTER_SOURCE": "s3", "IMPORTER_ENDPOINT": s3front.URL + "/bucket/disk.img",
			"IMPORTER_METADATA_CREDENTIALS": "true"}},
		{name: "env gcs external account", ok: true, gcs: cloud.wifFile(true, true), cloud: map[string]string{}, env: map[string]string{"IMPORTER_SOURCE": "gcs", "IMPORTER_ENDPOINT": gcs.URL + "/bucket/disk.img"}},
		{name: "env gcs external account refused", gcs: cloud.wifFile(false, true), cloud: map[string]string{}, env: map[string]string{"IMPORTER_SOURCE": "gcs", "IMPORTER_ENDPOINT": gcs.URL + "/bucket/disk.img"}},
		{name: "env registry", ok: true, env: map[string]string{"IMPORTER_SOURCE": "registry", "IMPORTER_ENDPOINT": ref,
			"IMPORTER_ACCESS_KEY_ID": regUser, "IMPORTER_SECRET_KEY": regPass, "INSECURE_TLS": "true",
			"IMPORTER_REGISTRY_IMAGE_ARCHITECTURE": "amd64", "REGISTRY_AUTH_FILE": regAuth, "CONTAINERS_REGISTRIES_CONF": regConf}},
		{name: "env registry blob redirected to a dead host", env: map[string]string{"IMPORTER_SOURCE": "registry", "IMPORTER_ENDPOINT": redirRef,
			"IMPORTER_ACCESS_KEY_ID": regUser, "IMPORTER_SECRET_KEY": regPass, "INSECURE_TLS": "true",
			"IMPORTER_REGISTRY_IMAGE_ARCHITECTURE": "amd64", "REGISTRY_AUTH_FILE": regAuth, "CONTAINERS_REGISTRIES_CONF": regConf}},
		{name: "env registry wrong password", env: map[string]string{"IMPORTER_SOURCE": "registry", "IMPORTER_ENDPOINT": ref,
			"IMPORTER_ACCESS_KEY_ID": regUser, "IMPORTER_SECRET_KEY": regWrong, "INSECURE_TLS": "true",
			"IMPORTER_REGISTRY_IMAGE_ARCHITECTURE": "amd64", "REGISTRY_AUTH_FILE": regAuth, "CONTAINERS_REGISTRIES_CONF": regConf}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", c.gcs)
			if c.cloud != nil {
				for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
					t.Setenv(v, "")
				}
				for k, v := range c.cloud {
					t.Setenv(k, v)
				}
			}
			var code int
			var outputs map[string]string
			var target string
			if c.env != nil {
				root := cdiRoot(t)
				e := map[string]string{"IMPORTER_CONTENTTYPE": "kubevirt", "IMPORTER_IMAGE_SIZE": "64Mi",
					"PREALLOCATION": "false", "IMPORTER_PATH_PREFIX": root}
				for k, v := range c.env {
					e[k] = v
				}
				var stdout, stderr string
				code, stdout, stderr = runCLI(t, nil, env(e), "-vv")
				term, _ := os.ReadFile(filepath.Join(root, "dev/termination-log"))
				outputs = map[string]string{"stdout": stdout, "stderr": stderr, "termination log": string(term)}
				target = filepath.Join(root, "data/disk.img")
			} else if c.inspect {
				var stdout, stderr string
				code, stdout, stderr = runCLI(t, nil, env(nil), append([]string{"inspect", "-vv", "--json"}, c.args...)...)
				outputs = map[string]string{"stdout": stdout, "stderr": stderr}
			} else {
				out := t.TempDir()
				tlog := filepath.Join(out, "result.json")
				target = filepath.Join(out, "disk.img")
				args := append(append([]string{"-vv", "--json", "--termination-log", tlog}, c.args...), target)
				var stdout, stderr string
				code, stdout, stderr = runCLI(t, nil, env(nil), args...)
				term, _ := os.ReadFile(tlog)
				outputs = map[string]string{"stdout": stdout, "stderr": stderr, "termination log": string(term)}
			}
			switch {
			case c.ok && c.inspect:
				require.Equal(t, cdi.ExitOK, code)
				assert.Contains(t, outputs["stdout"], `"sourceFormat":"raw"`)
			case c.ok:
				require.Equal(t, cdi.ExitOK, code)
				size := int64(-1)
				if c.env != nil {
					size = 1 << 20
				}
				assert.Equal(t, want, testimg.Digest(t, target, size))
			default:
				require.NotEqual(t, cdi.ExitOK, code)
				if c.args != nil && !c.inspect {
					assert.NotEmpty(t, outputs["termination log"], "a failure's result is written")
				}
			}
			for where, text := range outputs {
				for _, s := range secrets {
					if i := strings.Index(text, s); i >= 0 {
						t.Errorf("%s holds %q: …%s…", where, s, text[max(0, i-150):min(len(text), i+len(s)+50)])
					}
				}
			}
		})
	}
}

func serveData(data []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "disk.img", time.Time{}, bytes.NewReader(data))
	}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// gcsServiceAccountFile writes a service-account key whose token_uri is
// tokenURL; pemBody is a line of its private key's base64.
func gcsServiceAccountFile(t *testing.T, tokenURL string) (file, pemBody string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(k)
	require.NoError(t, err)
	p := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	return writeJSON(t, map[string]string{"type": "service_account", "client_email": "importer@test.iam.gserviceaccount.com",
		"private_key_id": "k1", "private_key": p, "token_uri": tokenURL}), strings.Split(p, "\n")[3]
}

func gcsAuthorizedUserFile(t *testing.T, tokenURL string) string {
	return writeJSON(t, map[string]string{"type": "authorized_user", "client_id": "importer.apps.googleusercontent.com",
		"client_secret": gcsClient, "refresh_token": gcsRefresh, "token_uri": tokenURL})
}

func writeJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "key.json")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}
