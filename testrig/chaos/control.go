package chaos

import (
	"encoding/json"
	"net/http"
	"time"
)

// Status is what GET /status answers.
type Status struct {
	Mode    Mode   `json:"mode"`
	Latency string `json:"latency"`
	Target  string `json:"target"`
	Listen  string `json:"listen"`
	Stats
}

// Status returns the proxy's mode, latency and counters.
func (p *Proxy) Status() Status {
	mode, latency, _ := p.state()
	return Status{Mode: mode, Latency: latency.String(), Target: p.opt.Target, Listen: p.Addr(), Stats: p.Stats()}
}

// Handler is the HTTP control API (see the package doc). Every answer is
// the proxy's Status as JSON; errors are 400 with a plain-text reason.
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Status())
	}
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) { reply(w) })
	mux.HandleFunc("POST /mode", func(w http.ResponseWriter, r *http.Request) {
		m := r.URL.Query().Get("m")
		if d := r.URL.Query().Get("d"); d != "" && m == "latency" {
			m += "=" + d
		}
		a, err := ParseAction(m)
		if err != nil {
			http.Error(w, "mode: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := p.Apply(a); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reply(w)
	})
	mux.HandleFunc("POST /cut", func(w http.ResponseWriter, r *http.Request) {
		p.Cut()
		reply(w)
	})
	mux.HandleFunc("POST /latency", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("d"))
		if err != nil || d < 0 {
			http.Error(w, "latency: d must be a duration such as 200ms", http.StatusBadRequest)
			return
		}
		p.SetLatency(d)
		reply(w)
	})
	return mux
}
