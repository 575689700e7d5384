package qemu

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
)

// Version is the first line of `qemu-img --version` without the program
// name ("7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)"), run like every other
// subcommand: confined, under the info limits and timeout.
func (r *Runner) Version(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.infoTimeout())
	defer cancel()
	var out bytes.Buffer
	if _, err := r.run(ctx, runSpec{sub: "--version", args: []string{"--version"}, limits: r.Limits.merge(defaultInfoLimits), stdout: &out}); err != nil {
		return "", err
	}
	line, _, _ := bufio.NewReader(&out).ReadLine()
	v := strings.TrimPrefix(strings.TrimPrefix(string(line), "qemu-img "), "version ")
	if v == "" {
		return "", fmt.Errorf("qemu-img --version printed nothing")
	}
	return v, nil
}
