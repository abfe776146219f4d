package fleet

import (
	"strconv"
	"strings"
)

// escapeToken escapes a key for a JSON Pointer (RFC 6901).
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// unescapeToken reverses escapeToken.
func unescapeToken(s string) string {
	if !strings.Contains(s, "~") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// splitPointer splits a JSON Pointer into unescaped tokens.
func splitPointer(ptr string) []string {
	if ptr == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, s := range parts {
		parts[i] = unescapeToken(s)
	}
	return parts
}

// joinPointer appends tokens to a pointer, escaping them.
func joinPointer(base string, tokens ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

func lastToken(ptr string) string {
	t := splitPointer(ptr)
	if len(t) == 0 {
		return ""
	}
	return t[len(t)-1]
}

func parentPointer(ptr string) string {
	i := strings.LastIndexByte(ptr, '/')
	if i < 0 {
		return ""
	}
	return ptr[:i]
}

func lookup(tree any, toks []string) (any, bool) {
	cur := tree
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
