package qemu

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// jsonPrefix starts a qemu filename that is a JSON block-options object
// (the engine's NBD exports) rather than a path.
const jsonPrefix = "json:"

// namedResources lists what a qemu-img filename makes it open: local files
// (or devices) and Unix sockets. A plain path names itself; a json: spec
// names every "filename" in it and every Unix-socket server address.
// Anything else in a spec (TCP servers, URLs) gets no access at all.
func namedResources(filename string) (files, sockets []string, err error) {
	spec, ok := strings.CutPrefix(filename, jsonPrefix)
	if !ok {
		return []string{filename}, nil, nil
	}
	var v any
	if err := json.Unmarshal([]byte(spec), &v); err != nil {
		return nil, nil, fmt.Errorf("qemu-img filename %.80q is not valid JSON: %w: %w", filename, err, errdefs.ErrInvalidOptions)
	}
	collectResources(v, &files, &sockets)
	return files, sockets, nil
}

// collectResources walks a decoded block-options object.
func collectResources(v any, files, sockets *[]string) {
	switch v := v.(type) {
	case map[string]any:
		if name, ok := v["filename"].(string); ok {
			*files = append(*files, name)
		}
		if typ, _ := v["type"].(string); typ == "unix" {
			if path, ok := v["path"].(string); ok {
				*sockets = append(*sockets, path)
			}
		}
		for _, child := range v {
			collectResources(child, files, sockets)
		}
	case []any:
		for _, child := range v {
			collectResources(child, files, sockets)
		}
	}
}
