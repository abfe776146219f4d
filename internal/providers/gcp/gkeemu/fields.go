package gkeemu

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// The fields of every request body the emulator takes, as container/v1's
// discovery document describes them (fields.json, derived from the document
// google.golang.org/api ships; TestFieldsFollowDiscovery regenerates it with
// -update). A request is checked against them before it is decoded, so a
// client may send any documented field, as GKE allows:
//
//   - a field the emulator models is kept and acts;
//   - a field it accepts and returns (ruleEcho) is stored as sent and
//     answered back where GET shows it, without further effect;
//   - an output-only field is ignored, as Google's APIs ignore output-only
//     fields in a request;
//   - any other documented field is refused with INVALID_ARGUMENT naming it,
//     unless it holds its default (false, 0, "", an empty list or object, an
//     enum's *_UNSPECIFIED), which is what the emulator models for it;
//   - a name the document does not have is refused as Google's JSON parser
//     refuses it ("Unknown name ... Cannot find field.").

//go:embed fields.json
var fieldsJSON []byte

// FieldSpec is one property of a discovery schema, reduced to what a
// request check needs.
type FieldSpec struct {
	Type     string     `json:"type,omitempty"`   // string, integer, number, boolean, object, array, any
	Format   string     `json:"format,omitempty"` // int32, int64, ...
	Ref      string     `json:"ref,omitempty"`    // the schema of an object
	Items    *FieldSpec `json:"items,omitempty"`  // an array's elements
	Values   *FieldSpec `json:"values,omitempty"` // a map's values
	ReadOnly bool       `json:"readOnly,omitempty"`
}

var (
	fieldsOnce sync.Once
	fields     map[string]map[string]*FieldSpec
)

func schemaFields() map[string]map[string]*FieldSpec {
	fieldsOnce.Do(func() {
		if err := json.Unmarshal(fieldsJSON, &fields); err != nil {
			panic("gkeemu: fields.json: " + err.Error()) // the embedded file is checked by a test
		}
	})
	return fields
}

// RequestSchemas are the discovery schemas of the request bodies the
// emulator takes; fields.json holds them and every schema they reach.
var RequestSchemas = []string{
	"CreateClusterRequest", "UpdateClusterRequest", "SetLabelsRequest",
	"CreateNodePoolRequest", "UpdateNodePoolRequest", "SetNodePoolSizeRequest", "SetNodePoolAutoscalingRequest",
}

type rule int

const (
	ruleModel rule = iota + 1 // kept, and (for an object) its fields checked by their own rules
	ruleEcho                  // kept as sent and answered back
)

// legacyIDs are the fields the projects.zones routes name their resources
// by, which the request bodies of both route families carry.
var legacyIDs = map[string]rule{"projectId": ruleModel, "zone": ruleModel, "clusterId": ruleModel, "nodePoolId": ruleModel, "name": ruleModel, "parent": ruleModel}

// rules say, per schema, which documented fields the emulator models or
// returns. A schema or field missing here is refused unless default.
var rules = map[string]map[string]rule{
	"CreateClusterRequest":          with(legacyIDs, map[string]rule{"cluster": ruleModel}),
	"CreateNodePoolRequest":         with(legacyIDs, map[string]rule{"nodePool": ruleModel}),
	"UpdateClusterRequest":          with(legacyIDs, map[string]rule{"update": ruleModel}),
	"SetLabelsRequest":              with(legacyIDs, map[string]rule{"resourceLabels": ruleModel, "labelFingerprint": ruleModel}),
	"SetNodePoolSizeRequest":        with(legacyIDs, map[string]rule{"nodeCount": ruleModel}),
	"SetNodePoolAutoscalingRequest": with(legacyIDs, map[string]rule{"autoscaling": ruleModel}),
	"UpdateNodePoolRequest": with(legacyIDs, map[string]rule{
		"nodeVersion": ruleModel, "imageType": ruleModel, "labels": ruleModel, "resourceLabels": ruleModel,
		"taints": ruleModel, "etag": ruleModel,
	}),
	"ClusterUpdate": {"desiredMasterVersion": ruleModel, "desiredNodeVersion": ruleModel, "desiredNodePoolId": ruleModel, "desiredImageType": ruleModel},
	"Cluster": {
		"name": ruleModel, "initialNodeCount": ruleModel, "nodeConfig": ruleModel, "locations": ruleModel,
		"initialClusterVersion": ruleModel, "resourceLabels": ruleModel, "nodePools": ruleModel,
		"privateClusterConfig": ruleModel, "networkConfig": ruleModel, "releaseChannel": ruleModel,
		"network": ruleModel, "subnetwork": ruleModel, "loggingService": ruleModel, "monitoringService": ruleModel,
		"description": ruleEcho, "ipAllocationPolicy": ruleEcho,
	},
	"PrivateClusterConfig": {"enablePrivateNodes": ruleModel, "enablePrivateEndpoint": ruleEcho, "masterIpv4CidrBlock": ruleEcho},
	"NetworkConfig":        {"defaultEnablePrivateNodes": ruleModel},
	"ReleaseChannel":       {"channel": ruleModel},
	"NodePool": {
		"name": ruleModel, "initialNodeCount": ruleModel, "locations": ruleModel, "autoscaling": ruleModel,
		"config": ruleModel, "management": ruleModel, "version": ruleModel, "upgradeSettings": ruleModel,
		"maxPodsConstraint": ruleModel,
	},
	"NodePoolAutoscaling": {
		"enabled": ruleModel, "minNodeCount": ruleModel, "maxNodeCount": ruleModel,
		"totalMinNodeCount": ruleModel, "totalMaxNodeCount": ruleModel, "locationPolicy": ruleModel,
	},
	"NodeManagement":    {"autoRepair": ruleModel, "autoUpgrade": ruleModel},
	"UpgradeSettings":   {"maxSurge": ruleModel, "maxUnavailable": ruleModel, "strategy": ruleModel, "blueGreenSettings": ruleEcho},
	"MaxPodsConstraint": {"maxPodsPerNode": ruleModel},
	"NodeConfig": {
		"machineType": ruleModel, "diskSizeGb": ruleModel, "diskType": ruleModel, "imageType": ruleModel,
		"spot": ruleModel, "preemptible": ruleModel, "accelerators": ruleModel, "labels": ruleModel,
		"resourceLabels": ruleModel, "taints": ruleModel, "oauthScopes": ruleModel, "serviceAccount": ruleModel,
		"metadata": ruleModel, "tags": ruleEcho,
	},
	"AcceleratorConfig":           {"acceleratorType": ruleModel, "acceleratorCount": ruleModel, "gpuDriverInstallationConfig": ruleModel},
	"GPUDriverInstallationConfig": {"gpuDriverVersion": ruleModel},
	"NodeTaint":                   {"key": ruleModel, "value": ruleModel, "effect": ruleModel},
	"NodeLabels":                  {"labels": ruleModel},
	"ResourceLabels":              {"labels": ruleModel},
	"NodeTaints":                  {"taints": ruleModel},
}

func with(a, b map[string]rule) map[string]rule {
	out := map[string]rule{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// decodeAs checks a request body against the discovery schema it must be,
// then decodes it into v (the fields the emulator models). It returns the
// accepted-and-returned fields, at their places in the body.
func decodeAs(body []byte, schema string, v any) (map[string]any, *apiError) {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, badRequest("Invalid JSON payload received. %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, badRequest("Invalid JSON payload received. Expected an object of %s.", schema)
	}
	echo, aerr := checkObject(schema, obj, "")
	if aerr != nil {
		return nil, aerr
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, badRequest("Invalid JSON payload received. %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return echo, nil
}

// checkObject checks one object of a schema; at is its field path, in the
// proto names GKE's messages use ("cluster.node_pools[0]").
func checkObject(schema string, obj map[string]any, at string) (map[string]any, *apiError) {
	props := schemaFields()[schema]
	var echo map[string]any
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		val := obj[k]
		spec := props[k]
		path := join(at, snake(k))
		if spec == nil {
			if at == "" {
				return nil, badRequest("Invalid JSON payload received. Unknown name %q: Cannot find field.", k)
			}
			return nil, badRequest("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, at)
		}
		if aerr := checkType(spec, val, path); aerr != nil {
			return nil, aerr
		}
		if spec.ReadOnly {
			continue
		}
		switch rules[schema][k] {
		case ruleEcho:
			if echo == nil {
				echo = map[string]any{}
			}
			echo[k] = val
		case ruleModel:
			sub, aerr := checkChildren(spec, val, path)
			if aerr != nil {
				return nil, aerr
			}
			if sub != nil {
				if echo == nil {
					echo = map[string]any{}
				}
				echo[k] = sub
			}
		default:
			if !isDefault(val) {
				return nil, badRequest("Invalid value for field '%s': %s. The emulator does not model this field of %s; leave it unset.", path, short(val), schema)
			}
		}
	}
	return echo, nil
}

// checkChildren checks the objects inside a modelled field by their own
// rules; it returns what of them is echoed (a map, or a list with a nil
// for each element that echoes nothing).
func checkChildren(spec *FieldSpec, val any, path string) (any, *apiError) {
	switch {
	case spec.Ref != "":
		if m, ok := val.(map[string]any); ok {
			e, aerr := checkObject(spec.Ref, m, path)
			if e == nil {
				return nil, aerr
			}
			return e, aerr
		}
	case spec.Items != nil && spec.Items.Ref != "":
		list, _ := val.([]any)
		var out []any
		found := false
		for i, el := range list {
			m, _ := el.(map[string]any)
			e, aerr := checkObject(spec.Items.Ref, m, fmt.Sprintf("%s[%d]", path, i))
			if aerr != nil {
				return nil, aerr
			}
			if e != nil {
				found = true
				out = append(out, e)
			} else {
				out = append(out, nil)
			}
		}
		if found {
			return out, nil
		}
	case spec.Values != nil && spec.Values.Ref != "":
		m, _ := val.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if sm, ok := m[k].(map[string]any); ok {
				if _, aerr := checkObject(spec.Values.Ref, sm, path+"["+k+"]"); aerr != nil {
					return nil, aerr
				}
			}
		}
	}
	return nil, nil
}

// checkType checks a value's JSON type against its field's, as proto3's
// JSON mapping takes it (an int64 as a string or a number, an int32 too).
func checkType(spec *FieldSpec, val any, path string) *apiError {
	if val == nil {
		return nil // null is the default of every field
	}
	bad := func() *apiError {
		return badRequest("Invalid value at '%s' (%s), %s", path, protoType(spec), short(val))
	}
	switch spec.Type {
	case "string":
		switch val.(type) {
		case string:
		case json.Number:
			if spec.Format != "int64" && spec.Format != "uint64" {
				return bad()
			}
		default:
			return bad()
		}
	case "integer", "number":
		switch x := val.(type) {
		case json.Number:
			if spec.Type == "integer" {
				if _, err := x.Int64(); err != nil {
					return bad()
				}
			}
		case string:
			if _, err := json.Number(x).Float64(); err != nil {
				return bad()
			}
		default:
			return bad()
		}
	case "boolean":
		if _, ok := val.(bool); !ok {
			return bad()
		}
	case "array":
		list, ok := val.([]any)
		if !ok {
			return bad()
		}
		for i, el := range list {
			if spec.Items != nil {
				if aerr := checkType(spec.Items, el, fmt.Sprintf("%s[%d]", path, i)); aerr != nil {
					return aerr
				}
			}
		}
	case "object":
		m, ok := val.(map[string]any)
		if !ok {
			return bad()
		}
		switch {
		case spec.Ref != "":
			// Fields of a nested object are checked by name and type even
			// where the whole object is echoed.
			props := schemaFields()[spec.Ref]
			for _, k := range slices.Sorted(maps.Keys(m)) {
				sub := props[k]
				if sub == nil {
					return badRequest("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, path)
				}
				if aerr := checkType(sub, m[k], join(path, snake(k))); aerr != nil {
					return aerr
				}
			}
		case spec.Values != nil:
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if aerr := checkType(spec.Values, m[k], path+"["+k+"]"); aerr != nil {
					return aerr
				}
			}
		}
	}
	return nil
}

func protoType(spec *FieldSpec) string {
	switch {
	case spec.Type == "boolean":
		return "TYPE_BOOL"
	case spec.Type == "integer" && spec.Format == "uint32":
		return "TYPE_UINT32"
	case spec.Type == "integer":
		return "TYPE_INT32"
	case spec.Type == "number":
		return "TYPE_DOUBLE"
	case spec.Type == "string" && spec.Format == "int64":
		return "TYPE_INT64"
	case spec.Type == "string":
		return "TYPE_STRING"
	case spec.Type == "array":
		return "TYPE_REPEATED"
	}
	return "TYPE_MESSAGE"
}

// isDefault: the value proto3 gives a field that is not set.
func isDefault(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 0
	case string:
		return x == "" || x == "0" || strings.HasSuffix(x, "_UNSPECIFIED")
	case []any:
		return len(x) == 0
	case map[string]any:
		for _, el := range x {
			if !isDefault(el) {
				return false
			}
		}
		return true
	}
	return false
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// snake is a field's proto name: initialNodeCount → initial_node_count.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// mergeEcho lays the fields a client sent (and the emulator returns as
// sent) over an answer; what the emulator models wins where both say.
func mergeEcho(dst, src map[string]any) {
	for k, v := range src {
		sv, isMap := v.(map[string]any)
		dv, has := dst[k]
		dm, dIsMap := dv.(map[string]any)
		switch {
		case !has:
			dst[k] = v
		case isMap && dIsMap:
			mergeEcho(dm, sv)
		}
	}
}

// withEcho marshals an answer with echoed fields laid over it.
func withEcho(v any, echo map[string]any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(echo) == 0 {
		return b, err
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	mergeEcho(m, echo)
	return json.Marshal(m)
}
