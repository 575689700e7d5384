package objtest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Sign signs a test request (no query, path already plain ASCII) with
// AWS Signature Version 4 for region us-east-1. It is the tests' own
// signer, written apart from the one under test.
func (s *S3) Sign(r *http.Request) { sign(r, s.Access, s.Secret, "us-east-1") }

func sign(r *http.Request, id, secret, region string) {
	now := time.Now().UTC()
	date := now.Format("20060102T150405Z")
	r.Header.Set("X-Amz-Date", date)
	payload := r.Header.Get("X-Amz-Content-Sha256")
	h := []string{"host:" + r.URL.Host, "x-amz-content-sha256:" + payload, "x-amz-date:" + date}
	sort.Strings(h)
	signed := "host;x-amz-content-sha256;x-amz-date"
	canon := r.Method + "\n" + (&url.URL{Path: r.URL.Path}).EscapedPath() + "\n" + r.URL.RawQuery + "\n" +
		strings.Join(h, "\n") + "\n\n" + signed + "\n" + payload
	scope := date[:8] + "/" + region + "/s3/aws4_request"
	d := sha256.Sum256([]byte(canon))
	mac := func(k []byte, s string) []byte { m := hmac.New(sha256.New, k); m.Write([]byte(s)); return m.Sum(nil) }
	k := mac(mac(mac(mac([]byte("AWS4"+secret), date[:8]), region), "s3"), "aws4_request")
	sig := hex.EncodeToString(mac(k, "AWS4-HMAC-SHA256\n"+date+"\n"+scope+"\n"+hex.EncodeToString(d[:])))
	r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+id+"/"+scope+", SignedHeaders="+signed+", Signature="+sig)
}

// MakeBucket creates a bucket.
func (s *S3) MakeBucket(t interface {
	Helper()
	Fatalf(string, ...any)
}, bucket string) {
	t.Helper()
	if code, body := s.do(t, http.MethodPut, "/"+bucket, nil); code != http.StatusOK {
		t.Fatalf("creating bucket %s: %d %s", bucket, code, body)
	}
}

// Put stores an object.
func (s *S3) Put(t interface {
	Helper()
	Fatalf(string, ...any)
}, bucket, key string, data []byte) {
	t.Helper()
	if code, body := s.do(t, http.MethodPut, "/"+bucket+"/"+key, data); code != http.StatusOK {
		t.Fatalf("putting s3://%s/%s: %d %s", bucket, key, code, body)
	}
}
