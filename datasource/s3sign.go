package datasource

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/diskimport/engine/errdefs"
)

// awsCreds are static AWS credentials; id "" means unsigned requests.
type awsCreds struct {
	id, secret, token string
}

// emptySHA256 is the hex SHA-256 of an empty payload (every GET).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// signV4 signs r with AWS Signature Version 4 for the s3 service (the
// Authorization header form) using minio-go's maintained signer: signing
// is easy to get subtly wrong and has to follow AWS. Every header set so
// far (Range, If-Match, X-Amz-*) is covered; the payload of a GET is empty.
func signV4(r *http.Request, c awsCreds, region string) *http.Request {
	if r.Header.Get("X-Amz-Content-Sha256") == "" {
		r.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	}
	return signer.SignV4(*r, c.id, c.secret, c.token, region)
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

// readS3Error reads and closes the body of an error answer.
func readS3Error(resp *http.Response) s3ErrorDoc {
	defer resp.Body.Close()
	var doc s3ErrorDoc
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	_ = xml.Unmarshal(body, &doc)
	return doc
}

// lapsedCredentials reports whether S3 refused a request for credentials
// it no longer holds: temporary credentials past their expiry (MinIO
// forgets them and answers InvalidAccessKeyId, versitygw XAdminUserNotFound;
// AWS answers ExpiredToken).
func (doc s3ErrorDoc) lapsedCredentials() bool {
	switch doc.Code {
	case "ExpiredToken", "InvalidToken", "TokenRefreshRequired", "InvalidAccessKeyId", "XAdminUserNotFound":
		return true
	}
	return false
}

// s3ErrorOf turns a 4xx answer and its error document into the error the
// HTTP source reports: an *errdefs.HTTPStatusError (a refusal, never
// retried) with S3's error code and message, and a plain account of the
// common cases.
func s3ErrorOf(resp *http.Response, doc s3ErrorDoc, object, ifMatch string) error {
	serr := &errdefs.HTTPStatusError{URL: object, StatusCode: resp.StatusCode, Status: resp.Status}
	var what string
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed && ifMatch != "":
		what = fmt.Sprintf("the object was replaced during the import (its ETag is no longer %s)", ifMatch)
	case doc.Code == "ExpiredToken":
		what = "the credentials expired"
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
