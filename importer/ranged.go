package importer

import (
	"encoding/json"
	"net/url"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/format"
)

// useRanged says whether qemu-img should read the image straight from the
// HTTP server with range requests instead of from a scratch copy. That skips
// a full write and read of the image, and qemu-img fetches only allocated
// clusters. It needs an uncompressed convertible image on a server that
// serves ranges, and no checksum: a digest must see every byte in order.
func (j *job) useRanged(st *datasource.Stream, img *format.Stream) bool {
	return st.Ranged != nil && j.opts.RangedRead && j.verifier == nil &&
		len(img.Compressions) == 0 && img.Format.NeedsConversion() &&
		// A truncated VDI converts "fine" (qemu reads missing blocks as
		// zeros); only the local check in vdicheck.go catches it.
		img.Format != format.VDI
}

// rangedSpec is the qemu-img filename that reads r with qemu's curl driver.
// "backing": null keeps qemu-img from opening any backing file the server
// might name, even if it served a different header to our own check.
func rangedSpec(r *datasource.RangedURL) string {
	driver := "http"
	if u, err := url.Parse(r.URL); err == nil && u.Scheme == "https" {
		driver = "https"
	}
	file := map[string]any{"driver": driver, "url": r.URL}
	if r.InsecureTLS {
		file["sslverify"] = false
	}
	b, _ := json.Marshal(map[string]any{"backing": nil, "file": file})
	return "json:" + string(b)
}
