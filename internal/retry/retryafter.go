package retry

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfterSeconds keeps a huge delay-seconds from overflowing a
// Duration; any cap a Policy sets is far below it.
const maxRetryAfterSeconds = 1 << 31

// RetryAfter reads an HTTP Retry-After value, as delay-seconds or as an
// HTTP date relative to now. It returns 0 when the value is absent,
// malformed or in the past; Streak.Wait applies the policy's cap.
func RetryAfter(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	if s, err := strconv.Atoi(value); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, maxRetryAfterSeconds)) * time.Second
	}
	if t, err := http.ParseTime(value); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
