package terminal

import (
	"encoding/json"
	"strings"
)

// FrameNotice is the rich-mode line {"type": "notice", "text": ...}, a
// termlink extension: the text is not part of the reply but a notice
// pushed to the session's device (Options.Push).
const FrameNotice = "notice"

// pushNotice hands a notice line's text to Options.Push.
func (s *runState) pushNotice(line []byte) {
	var f struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(line, &f) != nil || strings.TrimSpace(f.Text) == "" {
		s.log.Info(`agent "notice" frame without text dropped`, "line", preview(string(line)))
		return
	}
	if s.r.opt.Push == nil {
		s.log.Info(`agent "notice" frame dropped: nothing takes pushes`, "text", preview(f.Text))
		return
	}
	s.r.opt.Push(s.req.SessionKey, f.Text)
}
