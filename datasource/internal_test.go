package datasource

import (
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOrigin(t *testing.T) {
	same := [][2]string{
		{"http://h/a", "http://h:80/b"},
		{"https://H.example/a", "https://h.example:443/"},
		{"http://[::1]:8080/", "http://[::1]:8080/x"},
	}
	diff := [][2]string{
		{"http://h/a", "https://h/a"},
		{"http://127.0.0.1:1000/", "http://127.0.0.1:1001/"},
		{"http://a.example/", "http://b.a.example/"},
	}
	o := func(s string) string {
		u, err := url.Parse(s)
		require.NoError(t, err)
		return origin(u)
	}
	for _, p := range same {
		assert.Equal(t, o(p[0]), o(p[1]), p)
	}
	for _, p := range diff {
		assert.NotEqual(t, o(p[0]), o(p[1]), p)
	}
}

func TestRedactURLShowsNoUserInfoOrQueryValue(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@h/x.img?X-Amz-Signature=s1&X-Amz-Credential=c1&token=t1&hmac=h1&name=disk#frag": "https://REDACTED@h/x.img?X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED&token=REDACTED&hmac=REDACTED&name=REDACTED",
		"https://h/x.img?bare0token&empty=": "https://h/x.img?REDACTED&empty=",
		"http://h:8080/a%20b/disk.img":      "http://h:8080/a%20b/disk.img",
		"http://u:p@bad host/x.img?sig=s1":  "http://REDACTED@bad host/x.img?REDACTED",
		"ftp://u:p@h%zz/x?sig=s1":           "ftp://REDACTED@h%zz/x?REDACTED",
		"user:p@h/x.img":                    "user:REDACTED",
		"s3://bucket/key?region=eu-west-1":  "s3://bucket/key?region=REDACTED",
		"/var/lib/images/disk.img":          "/var/lib/images/disk.img",
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
	u, err := url.Parse("https://u:p@h/x?sig=s1")
	require.NoError(t, err)
	assert.Equal(t, "https://REDACTED@h/x?sig=REDACTED", redactURL(u))
}

func TestRedactedErrorHidesURLsAndKeepsTheChain(t *testing.T) {
	inner := &url.Error{Op: "Get", URL: "http://h:1/blob?X-Amz-Signature=s1&sig=s2", Err: errors.New("connection refused")}
	err := redactErrorURLs(fmt.Errorf("failed to pull image docker://u:p@reg:5000/cd/disk:v1: %w", inner))
	assert.Equal(t, `failed to pull image docker://REDACTED@reg:5000/cd/disk:v1: Get "http://h:1/blob?X-Amz-Signature=REDACTED&sig=REDACTED": connection refused`, err.Error())
	var ue *url.Error
	assert.True(t, errors.As(err, &ue))
	assert.NoError(t, redactErrorURLs(nil))
}
