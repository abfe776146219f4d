package fleet

import (
	"fmt"
	"strconv"
	"strings"
)

// Minor is a Kubernetes minor version: what policy.substrate.cluster.create
// .version names, and what a cluster's full version ("1.33.5-gke.1200",
// "v1.33.2", "1.33.2-do.0") comes down to when documents and clusters are
// compared. The patch is the provider's business and never compared.
type Minor struct {
	Major, Minor int
}

// ParseMinor reads a document's version ("1.34"). It accepts exactly what
// the schema does, so a caller holding a valid document never sees an
// error.
func ParseMinor(s string) (Minor, error) {
	maj, min, ok := strings.Cut(s, ".")
	m, err1 := strconv.Atoi(maj)
	n, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || maj != "1" || strconv.Itoa(n) != min || n < 0 {
		return Minor{}, fmt.Errorf("%q is not a Kubernetes minor such as \"1.34\"", s)
	}
	return Minor{Major: m, Minor: n}, nil
}

// MinorOf reads the minor of a version as a provider reports it: an
// optional "v", major and minor, then anything (the patch, the provider's
// build). ok is false for what holds no minor ("", "latest").
func MinorOf(version string) (Minor, bool) {
	v := strings.TrimPrefix(version, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return Minor{}, false
	}
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	m, err1 := strconv.Atoi(parts[0])
	n, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || m < 0 || n < 0 {
		return Minor{}, false
	}
	return Minor{Major: m, Minor: n}, true
}

// String is the document's spelling, "1.34".
func (m Minor) String() string { return fmt.Sprintf("%d.%d", m.Major, m.Minor) }

// Compare is -1, 0 or +1 as m is older than, the same as or newer than o.
func (m Minor) Compare(o Minor) int {
	switch {
	case m.Major != o.Major:
		if m.Major < o.Major {
			return -1
		}
		return 1
	case m.Minor < o.Minor:
		return -1
	case m.Minor > o.Minor:
		return 1
	}
	return 0
}

// Next is the minor after m.
func (m Minor) Next() Minor { return Minor{Major: m.Major, Minor: m.Minor + 1} }
