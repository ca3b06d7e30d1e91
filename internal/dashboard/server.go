package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

//go:embed assets
var assets embed.FS

// ErrTokenNeeded means the dashboard was asked to listen on an address
// other hosts can reach, without a token.
var ErrTokenNeeded = errors.New("a dashboard on an address that is not loopback needs a token")

// ErrAddrInUse means another process listens on the dashboard's address.
var ErrAddrInUse = errors.New("address already in use")

// Config is a dashboard server's settings.
type Config struct {
	// Addr is host:port to listen on. A host that is not loopback needs
	// Token.
	Addr string
	// Token, when set, must come with every request: as ?token= on the
	// first page (which sets a cookie for the rest) or as a bearer token.
	// Defaults to none, allowed only on loopback.
	Token string
}

// Loopback reports whether addr's host is a loopback address (or
// localhost): only this machine's users can reach it.
func Loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%q: want host:port, such as 127.0.0.1:8080", addr)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// Validate checks the address and that a reachable one has a token.
func (c Config) Validate() error {
	lo, err := Loopback(c.Addr)
	if err != nil {
		return err
	}
	if !lo && c.Token == "" {
		return ErrTokenNeeded
	}
	return nil
}

// Server serves the dashboard page, its snapshots and the designs' pages.
type Server struct {
	cfg   Config
	hub   *Hub
	model func() *Model
	ln    net.Listener
}

// Listen validates cfg and listens on its address, so that a port in
// use is an error at start, not once the run is under way.
func Listen(cfg Config, hub *Hub, model func() *Model) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen on %s: %w: another process serves there", cfg.Addr, ErrAddrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	return &Server{cfg: cfg, hub: hub, model: model, ln: ln}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the page's address, with the token when there is one.
func (s *Server) URL() string {
	u := "http://" + s.Addr() + "/"
	if s.cfg.Token != "" {
		u += "?token=<token>"
	}
	return u
}

// Serve serves until ctx ends; the open pages are told the server is
// going.
func (s *Server) Serve(ctx context.Context) error {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) { s.events(ctx, w, r) })
	mux.HandleFunc("GET /design/{seq}", s.design)
	srv := &http.Server{Handler: s.guard(mux), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// guard checks the token, allows only reads, and keeps the page from
// loading anything from elsewhere.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		if s.cfg.Token != "" && !s.authorized(w, r) {
			http.Error(w, "a token is needed: open the page as /?token=...", http.StatusUnauthorized)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

const tokenCookie = "evoq_dashboard"

// authorized takes the token from the query (setting a cookie, so that
// the page's own requests carry it), the cookie or a bearer header.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	same := func(t string) bool { return subtle.ConstantTimeCompare([]byte(t), []byte(s.cfg.Token)) == 1 }
	if t := r.URL.Query().Get("token"); t != "" && same(t) {
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		return true
	}
	if c, err := r.Cookie(tokenCookie); err == nil && same(c.Value) {
		return true
	}
	t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && same(t)
}

// events streams the snapshots to one page as server-sent events.
func (s *Server) events(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming not supported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	ch, stop := s.hub.Subscribe()
	defer stop()
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case data := <-ch:
			fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", data)
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-ctx.Done():
			fmt.Fprint(w, "event: bye\ndata: the dashboard's process is stopping\n\n")
			fl.Flush()
			return
		case <-r.Context().Done():
			return
		}
		fl.Flush()
	}
}

// design answers one design's genome, metrics, attempts and curve.
func (s *Server) design(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	m := s.model()
	if err != nil || m == nil {
		http.NotFound(w, r)
		return
	}
	d, ok := m.Design(seq)
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d)
}
