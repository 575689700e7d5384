package uploadserver

import "net/http"

// uploadKind is how a path takes its body.
type uploadKind struct {
	form    bool // a multipart form, field "file"
	async   bool // answer once received; finish in the background
	archive bool // a tar stream extracted into the target's directory
}

// uploadRoutes are CDI's upload paths (with its v1alpha1 aliases, which
// older clients still use) and the methods each accepts.
var uploadRoutes = []struct {
	paths   []string
	methods []string
	kind    uploadKind
}{
	{[]string{PathUpload, "/v1alpha1/upload"}, []string{http.MethodPost, http.MethodPut}, uploadKind{}},
	{[]string{PathUploadAsync, "/v1alpha1/upload-async"}, []string{http.MethodPost, http.MethodPut}, uploadKind{async: true}},
	{[]string{PathUploadForm, "/v1alpha1/upload-form"}, []string{http.MethodPost}, uploadKind{form: true}},
	{[]string{PathUploadFormAsync, "/v1alpha1/upload-form-async"}, []string{http.MethodPost}, uploadKind{form: true, async: true}},
	{[]string{PathUploadArchive, "/v1alpha1/upload-archive"}, []string{http.MethodPost, http.MethodPut}, uploadKind{archive: true}},
	{[]string{PathUploadArchiveAsync}, []string{http.MethodPost, http.MethodPut}, uploadKind{archive: true, async: true}},
}

// serveHead answers HEAD on an upload path: 200, as CDI's upload proxy
// expects when it probes a path. A resumable clone learns here where to
// resume (describeClone).
func (h *Handler) serveHead(w http.ResponseWriter, r *http.Request) {
	h.describeClone(w, r)
	w.WriteHeader(http.StatusOK)
}
