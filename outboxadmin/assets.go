package outboxadmin

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// ui holds the dashboard: plain HTML, CSS and JavaScript, no build step. The
// page uses relative URLs, so it works under any BasePath and behind
// http.StripPrefix.
//
//go:embed ui
var ui embed.FS

// page serves the dashboard's files. They hold no data, so with only a
// bearer token configured they are public (the page asks for the token);
// with basic auth they need it, so that the browser asks for the password.
func (h *Handler) page(fn http.HandlerFunc) http.Handler {
	if h.cfg.BasicAuth != nil {
		return h.requireAuth(fn)
	}
	return fn
}

func (h *Handler) serveIndex(w http.ResponseWriter, r *http.Request) {
	h.serveFile(w, r, "ui/index.html")
}

func (h *Handler) serveAsset(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, h.cfg.basePath()+"/assets/")
	if name == "" || strings.Contains(name, "..") || name == "index.html" {
		http.NotFound(w, r)
		return
	}
	h.serveFile(w, r, path.Join("ui", name))
}

func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, name string) {
	data, err := fs.ReadFile(ui, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	// Revalidate every time: a new binary may bring new assets under the
	// same names.
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(data)
}
