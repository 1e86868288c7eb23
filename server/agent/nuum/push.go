package nuum

import "strings"

// push hands the text of an assistant frame that came outside any turn
// (the agent speaking on its own, after its turn ended) to Options.Push,
// which makes it a notice for the session's device.
func (p *proc) push(f frame) {
	if p.r.opt.Push == nil {
		return
	}
	var parts []string
	for _, b := range f.content() {
		if t := strings.TrimSpace(b.Text); b.Type == "text" && t != "" {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return
	}
	p.Log.Info("agent spoke outside a turn; pushed to the device as a notice")
	p.r.opt.Push(p.Key, strings.Join(parts, "\n"))
}
