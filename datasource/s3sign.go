package datasource

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// awsCreds are static AWS credentials; id "" means unsigned requests.
type awsCreds struct {
	id, secret, token string
}

// emptySHA256 is the hex SHA-256 of an empty payload (every GET).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func nowUTC() time.Time { return time.Now().UTC() }

// signV4 signs r in place with AWS Signature Version 4 for the s3 service
// (the Authorization header form). The payload hash is the request's
// X-Amz-Content-Sha256 when set, else that of an empty body.
func signV4(r *http.Request, c awsCreds, region string, now time.Time) {
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = emptySHA256
		r.Header.Set("X-Amz-Content-Sha256", payload)
	}
	r.Header.Set("X-Amz-Date", amzDate)
	if c.token != "" {
		r.Header.Set("X-Amz-Security-Token", c.token)
	}
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	// Signed: host, range and every x-amz-* header.
	hdrs := map[string]string{"host": host}
	if rg := r.Header.Get("Range"); rg != "" {
		hdrs["range"] = rg
	}
	for k, v := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-amz-") {
			hdrs[lk] = strings.Join(v, ",")
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range hdrs {
			if !yield(k) {
				return
			}
		}
	})
	var canonHdrs strings.Builder
	for _, k := range names {
		canonHdrs.WriteString(k + ":" + strings.TrimSpace(hdrs[k]) + "\n")
	}
	signed := strings.Join(names, ";")
	canon := strings.Join([]string{
		r.Method,
		s3Escape(r.URL.Path),
		canonicalQuery(r.URL.Query()),
		canonHdrs.String(),
		signed,
		payload,
	}, "\n")
	scope := day + "/" + region + "/s3/aws4_request"
	sum := sha256.Sum256([]byte(canon))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	key := hmacSHA256([]byte("AWS4"+c.secret), day)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, "s3")
	key = hmacSHA256(key, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(key, toSign))
	r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+c.id+"/"+scope+", SignedHeaders="+signed+", Signature="+sig)
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// canonicalQuery is the query sorted by name, then value, each part
// encoded as SigV4 wants.
func canonicalQuery(q url.Values) string {
	var parts []string
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, awsEscape(k, true)+"="+awsEscape(v, true))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "&")
}

// s3Escape encodes an object path as S3 signs it: every byte but the
// unreserved characters and '/' percent-encoded, once.
func s3Escape(p string) string { return awsEscape(p, false) }

func awsEscape(s string, slash bool) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && !slash) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// s3ErrorDoc is S3's XML error body.
type s3ErrorDoc struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// s3Error turns a 4xx answer into the error the HTTP source reports: an
// *errdefs.HTTPStatusError (a refusal, never retried) with S3's error code
// and message, and a plain account of the common cases.
func s3Error(resp *http.Response, object, ifMatch string) error {
	defer resp.Body.Close()
	var doc s3ErrorDoc
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	_ = xml.Unmarshal(body, &doc)
	serr := &errdefs.HTTPStatusError{URL: object, StatusCode: resp.StatusCode, Status: resp.Status}
	var what string
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed && ifMatch != "":
		what = fmt.Sprintf("the object was replaced during the import (its ETag is no longer %s)", ifMatch)
	case doc.Code == "InvalidAccessKeyId" || doc.Code == "SignatureDoesNotMatch" ||
		doc.Code == "XAdminUserNotFound": // versitygw's answer to an unknown key id (a 404)
		what = "wrong credentials"
	case doc.Code == "NoSuchBucket":
		what = "the bucket does not exist"
	case doc.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound:
		what = "no such object"
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		what = "access denied"
	default:
		what = "refused"
	}
	if doc.Code != "" {
		return fmt.Errorf("S3 %s: %s (%s: %s): %w", object, what, doc.Code, doc.Message, serr)
	}
	return fmt.Errorf("S3 %s: %s: %w", object, what, serr)
}
