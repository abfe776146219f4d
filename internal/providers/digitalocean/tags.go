package digitalocean

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// DigitalOcean tags hold letters, digits, ':', '-' and '_' (at most 255),
// so a label such as `fleet-agent.dev/substrate-pool=pool_ab12` cannot be a
// tag as it is. The adapter spells this project's labels as tags
//
//	fleet-agent.dev/<name>=<value>   <->   fleet-agent:<name>:<value>
//
// and marks everything it makes with the tag `fleet-agent`, which is what a
// lookup by name requires (an owner's cluster of the same name is not
// ours). Only labels under `fleet-agent.dev/` travel this way: a cluster has
// no other labels, and a node pool keeps every label as a Kubernetes label.
const (
	markerTag   = "fleet-agent"
	tagPrefix   = "fleet-agent:"
	labelDomain = "fleet-agent.dev/"
)

var (
	labelNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	tagValueRE  = regexp.MustCompile(`^[A-Za-z0-9_:-]*$`)
)

// tagOf is the tag of one of this project's labels.
func tagOf(key, value string) (string, error) {
	name, ok := strings.CutPrefix(key, labelDomain)
	if !ok || !labelNameRE.MatchString(name) {
		return "", fmt.Errorf("label %q: DOKS tags carry only labels fleet-agent.dev/<letters, digits, '-'>", key)
	}
	if !tagValueRE.MatchString(value) {
		return "", fmt.Errorf("label %s=%q: a DOKS tag holds only letters, digits, ':', '-' and '_'", key, value)
	}
	t := tagPrefix + name + ":" + value
	if len(t) > 255 {
		return "", fmt.Errorf("label %s: its tag would be longer than DigitalOcean's 255 characters", key)
	}
	return t, nil
}

// clusterTags are the tags of a cluster: the marker and every label.
func clusterTags(op string, labels map[string]string) ([]string, error) {
	tags := []string{markerTag}
	for _, k := range sortedKeys(labels) {
		t, err := tagOf(k, labels[k])
		if err != nil {
			return nil, providers.Invalidf(op, "label", "%v", err)
		}
		tags = append(tags, t)
	}
	return tags, nil
}

// poolTags are the tags of a node pool: the marker and its labels of this
// project (the others stay Kubernetes labels only).
func poolTags(labels map[string]string) []string {
	tags := []string{markerTag}
	for _, k := range sortedKeys(labels) {
		if t, err := tagOf(k, labels[k]); err == nil {
			tags = append(tags, t)
		}
	}
	return tags
}

// labelsOf reads this project's labels back from tags.
func labelsOf(tags []string) map[string]string {
	var out map[string]string
	for _, t := range tags {
		rest, ok := strings.CutPrefix(t, tagPrefix)
		if !ok {
			continue
		}
		name, value, ok := strings.Cut(rest, ":")
		if !ok || !labelNameRE.MatchString(name) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[labelDomain+name] = value
	}
	return out
}

// withOurTags replaces the tags the adapter owns (the marker and the
// encoded labels) in a tag list, keeping the owner's and dropping those
// DigitalOcean adds itself (k8s, k8s-worker, k8s:<id>), which it adds back.
func withOurTags(have, ours []string) []string {
	var out []string
	for _, t := range have {
		if t == markerTag || strings.HasPrefix(t, tagPrefix) || t == "k8s" || t == "k8s-worker" || strings.HasPrefix(t, "k8s:") {
			continue
		}
		out = append(out, t)
	}
	return append(out, ours...)
}

func marked(tags []string) bool { return slices.Contains(tags, markerTag) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
