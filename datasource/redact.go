package datasource

import (
	"net/url"
	"strings"
)

// sensitiveQueryWords mark query parameters that carry secrets, such as the
// signature of a pre-signed S3 or GCS URL.
var sensitiveQueryWords = []string{"sig", "token", "key", "pass", "secret", "auth", "credential", "session"}

// redactURL renders u for logs and error messages: the user info is
// dropped and secret-looking query values are masked.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		q := c.Query()
		changed := false
		for k := range q {
			lk := strings.ToLower(k)
			for _, w := range sensitiveQueryWords {
				if strings.Contains(lk, w) {
					q[k] = []string{"REDACTED"}
					changed = true
					break
				}
			}
		}
		if changed {
			c.RawQuery = q.Encode()
		}
	}
	return c.String()
}
