package fleet

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strconv"
	"strings"
)

// GenerationName is the name a blue/green flavor's node pool of generation
// gen is made under, in place of the flavor's name: the flavor itself for
// the first generation, then `<flavor>-g<gen>`. It is never longer than
// the flavor name or 30 characters, whichever is more, so a node pool name
// that fits a provider's limit for the flavor fits it for every
// generation: a name that would be longer is cut and given four characters
// of the flavor's hash before the suffix, so that two long flavors sharing
// a prefix never share a generation name.
func GenerationName(flavor string, gen int) string {
	if gen <= 1 {
		return flavor
	}
	suffix := "-g" + strconv.Itoa(gen)
	limit := max(30, len(flavor))
	if len(flavor)+len(suffix) <= limit {
		return flavor + suffix
	}
	sum := sha256.Sum256([]byte(flavor))
	h := strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:4]
	keep := max(limit-len(suffix)-len(h), 1)
	return strings.TrimRight(flavor[:min(keep, len(flavor))], "-") + h + suffix
}

// GenerationOf is the generation a name is of a flavor's (GenerationName
// turned back): ok false when the name is no generation of it.
func GenerationOf(flavor, name string) (int, bool) {
	if name == flavor {
		return 1, true
	}
	i := strings.LastIndex(name, "-g")
	if i < 0 {
		return 0, false
	}
	gen, err := strconv.Atoi(name[i+2:])
	if err != nil || gen < 2 || strconv.Itoa(gen) != name[i+2:] {
		return 0, false
	}
	if GenerationName(flavor, gen) != name {
		return 0, false
	}
	return gen, true
}

// replaceFindings refuses a flavor whose name is a generation name of a
// blue/green flavor of the same substrate: its node pool and one of the
// other flavor's replacements would have one name.
func replaceFindings(base string, flavors []any) []finding {
	var out []finding
	for _, a := range flavors {
		am, _ := a.(map[string]any)
		if r, _ := am["replace"].(string); r != ReplaceBlueGreen {
			continue
		}
		owner, _ := am["name"].(string)
		for bi, b := range flavors {
			bm, _ := b.(map[string]any)
			name, _ := bm["name"].(string)
			if name == owner || owner == "" {
				continue
			}
			if gen, ok := GenerationOf(owner, name); ok {
				out = append(out, finding{ptr: joinPointer(base, strconv.Itoa(bi), "name"),
					msg: fmt.Sprintf("flavor %q is the name of generation %d of flavor %q, which is replaced blue/green; rename this flavor", name, gen, owner)})
			}
		}
	}
	return out
}
