package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A text body is "a page the server returned" only for sources read over
// HTTP; a registry layer's file, a local file and standard input are "the
// source".
func TestServedOverHTTP(t *testing.T) {
	for src, want := range map[string]bool{
		"https://example.org/disk.img":        true,
		"http://127.0.0.1:8080/disk.img":      true,
		"s3://bucket/disk.img":                true,
		"s3+https://minio.local/bucket/d.img": true,
		"gs://bucket/disk.img":                true,
		"gs+http://127.0.0.1:4443/b/disk.img": true,
		"docker://quay.io/containerdisks/x:1": false,
		"oci-archive:/tmp/image.tar":          false,
		"/var/lib/images/disk.img":            false,
		"-":                                   false,
	} {
		assert.Equal(t, want, servedOverHTTP(src), src)
	}
}
