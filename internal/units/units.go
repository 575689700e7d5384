// Package units renders byte counts and rates for people: IEC units
// (KiB, MiB, GiB…) with one decimal, as the command line and the error
// messages print them.
package units

import "fmt"

// Bytes renders n as "512 B", "1.5 KiB", "2.0 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, exp := float64(n), -1
	for (v >= unit || v <= -unit) && exp < 5 {
		v /= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp])
}

// Rate renders bytes per second as "496 MiB/s".
func Rate(bytesPerSecond float64) string {
	return Bytes(int64(bytesPerSecond)) + "/s"
}
