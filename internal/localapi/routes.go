package localapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// routes dispatches on the exact path and the method, and answers every
// request it has no route for as any other refusal: JSON with a code and
// advice. net/http's ServeMux is not used because its own answers (a 405 or
// 404 in plain text, a 307 to a cleaned path with an HTML body) are not the
// local API's, and a script reading them would have to parse two shapes.
type routes map[string]map[string]http.HandlerFunc

// routesPage is where a person finds the routes and their methods.
const routesPage = "docs/commands.md (the local API's routes)"

func (rs routes) add(method, path string, h http.HandlerFunc) {
	if rs[path] == nil {
		rs[path] = map[string]http.HandlerFunc{}
	}
	rs[path][method] = h
}

func (rs routes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	methods, ok := rs[r.URL.Path]
	if !ok {
		WriteJSON(w, http.StatusNotFound, apiError{Code: refusal.InvalidInput,
			Message: fmt.Sprintf("bad request: the local API has no route %s (paths are exact and lower case, under /v1/): see %s", quotePath(r.URL.Path), routesPage)})
		return
	}
	h, ok := methods[r.Method]
	if !ok {
		allow := make([]string, 0, len(methods))
		for m := range methods {
			allow = append(allow, m)
		}
		sort.Strings(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteJSON(w, http.StatusMethodNotAllowed, apiError{Code: refusal.InvalidInput,
			Message: fmt.Sprintf("bad request: %s takes %s, not %s: see %s", r.URL.Path, strings.Join(allow, " or "), quoteMethod(r.Method), routesPage)})
		return
	}
	h(w, r)
}

// quotePath shows a path a client sent, bounded and quoted, so a hostile
// one cannot forge lines in the message.
func quotePath(p string) string {
	if len(p) > 200 {
		p = p[:200] + "..."
	}
	return fmt.Sprintf("%q", p)
}

func quoteMethod(m string) string {
	if len(m) > 20 {
		m = m[:20] + "..."
	}
	q := fmt.Sprintf("%q", m)
	if q == `"`+m+`"` {
		return m
	}
	return q
}

// decodeError says why a request body was refused in the API's words: the
// field and the JSON it takes, not the Go type it is decoded into.
func decodeError(err error) string {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	var b64 base64.CorruptInputError
	var big *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return "the body is empty: send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ends before its JSON does: send one whole JSON object"
	case errors.As(err, &big):
		return fmt.Sprintf("the body is too large (at most %d bytes)", maxRequest)
	case errors.As(err, &syn):
		return fmt.Sprintf("the body is not JSON (at byte %d): send one JSON object", syn.Offset)
	case errors.As(err, &b64):
		return fmt.Sprintf("a field that takes base64 is not base64 (at byte %d of its text)", int64(b64))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Sprintf("the body is %s: send a JSON object", jsonKind(typ.Value))
		}
		return fmt.Sprintf("field %q is %s where it takes %s", typ.Field, jsonKind(typ.Value), jsonType(typ.Type))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Sprintf("unknown field %s: the fields of each route are in %s", strings.TrimPrefix(err.Error(), "json: unknown field "), routesPage)
	}
	return err.Error()
}

// jsonKind names the JSON value encoding/json reports ("number 5" says
// "number").
func jsonKind(v string) string {
	word, _, _ := strings.Cut(v, " ")
	switch word {
	case "number", "string", "bool", "array", "object":
		if word == "bool" {
			return "true or false"
		}
		if word == "array" || word == "object" {
			return "an " + word
		}
		return "a " + word
	}
	return "a value of another kind"
}

// jsonType names the JSON a Go type takes.
func jsonType(t reflect.Type) string {
	if t == nil {
		return "another kind of value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string (the bytes in base64)"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another kind of value"
}
