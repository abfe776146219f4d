package ui

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-agent/fleet-agent/internal/clock"
	"github.com/fleet-agent/fleet-agent/internal/state"
	"github.com/fleet-agent/fleet-agent/internal/textline"
	"github.com/fleet-agent/fleet-agent/internal/webhooks"
)

//go:embed templates/*.html static/*
var files embed.FS

// Options wire the pages.
type Options struct {
	// Read gives the fleet as it is now; it is called once per request.
	Read func(ctx context.Context) (*Fleet, error)
	// Clock stamps the page (relative times); nil is the wall clock.
	Clock clock.Clock
	// Refresh is how often the page's script refreshes it; 0 is 10 s.
	Refresh time.Duration
}

// pages are the page names, each a template under templates/ with the
// layout, and the title its heading and nav show.
var pages = []struct{ name, path, title string }{
	{"overview", "", "Overview"},
	{"proposals", "proposals", "Proposals"},
	{"substrates", "substrates", "Substrates"},
	{"audit", "audit", "Audit"},
}

// view is what a page template gets.
type view struct {
	F       *Fleet
	Page    string
	Title   string
	Nav     []navItem
	Kind    string   // the audit filter
	Kinds   []string // every audit kind
	Refresh int      // seconds
}

type navItem struct {
	Href, Title string
	Current     bool
}

// Handler serves the pages under /ui/ (and their style and script under
// /ui/static/). Links are relative, so the pages work behind a proxy that
// mounts them under another path.
func Handler(o Options) http.Handler {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Refresh <= 0 {
		o.Refresh = 10 * time.Second
	}
	tmpl := map[string]*template.Template{}
	for _, p := range pages {
		tmpl[p.name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+p.name+".html"))
	}
	static, _ := fs.Sub(files, "static")
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	for _, p := range pages {
		mux.HandleFunc("GET /ui/"+p.path+pathEnd(p.path), func(w http.ResponseWriter, r *http.Request) {
			f, err := o.Read(r.Context())
			if err != nil {
				http.Error(w, "the fleet cannot be read: "+err.Error(), http.StatusInternalServerError)
				return
			}
			if f.Now.IsZero() {
				f.Now = o.Clock.Now()
			}
			v := view{F: f, Page: p.name, Title: p.title, Kinds: AuditKinds, Refresh: int(o.Refresh / time.Second)}
			for _, q := range pages {
				href := q.path
				if href == "" {
					href = "./"
				}
				v.Nav = append(v.Nav, navItem{Href: href, Title: q.title, Current: q.name == p.name})
			}
			if p.name == "audit" {
				// An unknown kind shows every row rather than none: the
				// filter is a convenience, not a query language.
				for _, k := range AuditKinds {
					if r.URL.Query().Get("kind") == k {
						v.Kind = k
					}
				}
			}
			var b bytes.Buffer
			if err := tmpl[p.name].Execute(&b, v); err != nil {
				http.Error(w, "the page cannot be rendered: "+err.Error(), http.StatusInternalServerError)
				return
			}
			header(w)
			_, _ = w.Write(b.Bytes())
		})
	}
	return mux
}

// pathEnd makes the overview match /ui/ only, not everything under it.
func pathEnd(path string) string {
	if path == "" {
		return "{$}"
	}
	return ""
}

// header says what the page may do in the browser: its own style and
// script only, no frames, no referrer (a commit link must not tell the
// forge where the ops listener is), and no caching of a page that is
// only true now.
func header(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// stamp is a time as the page shows it: relative, and absolute in UTC.
type stamp struct {
	Rel, Abs, ISO string
	Zero          bool
}

var funcs = template.FuncMap{
	// plain shows words from outside (a provider's error) as one line of
	// plain text; the template escapes the markup.
	"plain": textline.Plain,
	// when shows t (a time.Time, or Unix ms) against now.
	"when": func(now time.Time, v any) stamp {
		var t time.Time
		switch x := v.(type) {
		case time.Time:
			t = x
		case int64:
			if x > 0 {
				t = time.UnixMilli(x)
			}
		case *int64:
			if x != nil && *x > 0 {
				t = time.UnixMilli(*x)
			}
		}
		if t.IsZero() {
			return stamp{Zero: true}
		}
		t = t.UTC()
		return stamp{Rel: relative(now, t), Abs: t.Format("2006-01-02 15:04:05 UTC"), ISO: t.Format(time.RFC3339)}
	},
	"short": short,
	// dict names a commit for the "commit" template: link prefix and sha.
	"dict": func(url, sha string) struct{ URL, SHA string } { return struct{ URL, SHA string }{url, sha} },
	"since": func(now time.Time, v any) string {
		switch x := v.(type) {
		case time.Time:
			if !x.IsZero() {
				return duration(now.Sub(x))
			}
		}
		return ""
	},
	"add": func(a ...int) int {
		n := 0
		for _, x := range a {
			n += x
		}
		return n
	},
	"max1":   func(n int) int { return max(n, 1) },
	"plural": plural,
	// lastDelivery is the newest of a webhook's deliveries or failures.
	"lastDelivery": func(ds []webhooks.Delivery) *webhooks.Delivery {
		if len(ds) == 0 {
			return nil
		}
		return &ds[len(ds)-1]
	},
	"join":    strings.Join,
	"refName": func(ref string) string { return strings.TrimPrefix(ref, "refs/heads/") },
	"stateClass": func(s string) string {
		switch s {
		case string(state.SubstrateError), string(state.Failed):
			return "bad"
		case string(state.SubstrateReady), string(state.Succeeded), string(state.SubstrateDeleted):
			return "good"
		}
		return "busy"
	},
	// conditionClass colours a condition's status: True is done, False
	// needs a person, Unknown is in progress.
	"conditionClass": func(s string) string {
		switch s {
		case "True":
			return "good"
		case "False":
			return "bad"
		}
		return "busy"
	},
	"lineClass": func(line string) string {
		if line == "" {
			return ""
		}
		switch line[0] {
		case '+':
			return "add"
		case '-':
			return "del"
		case '~':
			return "mod"
		case '!':
			return "bad"
		}
		return ""
	},
}

// relative is how long ago t was (or how far ahead), in the largest unit
// that is at least one.
func relative(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		return "in " + duration(-d)
	}
	if d < time.Second {
		return "just now"
	}
	return duration(d) + " ago"
}

// duration is d in its largest whole unit: 42 s, 3 min, 5 h, 2 d.
func duration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " d"
}

func itoa(n int) string { return strconv.Itoa(n) }
