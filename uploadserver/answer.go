package uploadserver

import (
	"encoding/json"

	"github.com/diskimport/engine/importer"
)

// The texts of a completed upload and clone, CDI's upload server's: the
// Message of an Answer and of the upload pod's termination message.
const (
	MessageUploadComplete = "Upload Complete"
	MessageCloneComplete  = "Clone Complete"
)

// Answer is the JSON body of the 200 that ends an upload or a clone: what
// completed (MessageUploadComplete or MessageCloneComplete) and the
// import's result under the names importer.Result's JSON gives them. A
// client (the importer's upload and clone-source commands) decodes this
// type; a failure is a plain-text status instead.
type Answer struct {
	Message              string            `json:"message"`
	PreallocationApplied bool              `json:"preallocationApplied"`
	Labels               map[string]string `json:"labels,omitempty"`
	importer.ResultJSON
}

// answerJSON is the one line of JSON that answers the import res.
func answerJSON(res *importer.Result, clone bool) []byte {
	a := Answer{Message: MessageUploadComplete, PreallocationApplied: res.PreallocationApplied,
		Labels: res.Labels, ResultJSON: res.JSONFields()}
	if clone {
		a.Message = MessageCloneComplete
	}
	b, _ := json.Marshal(a) // strings, numbers and a string map: it cannot fail
	return b
}
