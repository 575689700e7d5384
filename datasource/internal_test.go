package datasource

import (
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

func TestRedactURL(t *testing.T) {
	u, err := url.Parse("https://u:p@h/x.img?X-Amz-Signature=s1&X-Amz-Credential=c1&token=t1&name=disk")
	require.NoError(t, err)
	r := redactURL(u)
	for _, secret := range []string{"u:p", "s1", "c1", "t1"} {
		assert.NotContains(t, r, secret)
	}
	assert.Contains(t, r, "name=disk")
	assert.Contains(t, r, "https://h/x.img")
}
