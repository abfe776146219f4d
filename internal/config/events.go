package config

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fleet-agent/fleet-agent/internal/events"
)

// Events says where the agent's events go (docs/configuration.md).
type Events struct {
	Webhooks []Webhook
}

// Webhook is one receiver of events.webhooks.
type Webhook struct {
	// URL is an http(s) URL, or a secret reference to one (a Slack
	// incoming webhook's URL is a credential).
	URL string
	// Secret is the reference to the HMAC-SHA256 key; required.
	Secret string
	// Events are the event types sent; empty for all.
	Events []string
	// Format is cloudevents (the default) or slack.
	Format string
	Line   int
}

var (
	eventsKeys  = []string{"webhooks"}
	webhookKeys = []string{"url", "secret", "events", "format"}
)

func (p *parser) events(m map[string]entry) {
	e, ok := m["webhooks"]
	if !ok || isNull(e.value) {
		return
	}
	if e.value.Kind != yaml.SequenceNode {
		p.errorf(e.value.Line, "events.webhooks must be a list of webhooks (url, secret, events, format), not %s", describe(e.value))
		return
	}
	seen := map[string]int{}
	for i, n := range e.value.Content {
		path := "events.webhooks[" + strconv.Itoa(i) + "]"
		wm := p.mapping(n, path, webhookKeys)
		if wm == nil {
			continue
		}
		w := Webhook{Line: n.Line}
		if v, ok := p.strValue(wm, path, "url"); ok {
			switch {
			case looksLikeRef(v.Value):
				p.secret(wm, path, "url", &w.URL)
			default:
				if msg := checkWebhookURL(v.Value); msg != "" {
					p.errorf(v.Line, "%s.url: %s", path, msg)
				} else {
					w.URL = v.Value
				}
			}
		} else if _, present := wm["url"]; !present {
			p.errorf(n.Line, "%s needs a url (http or https, or a secret reference to one)", path)
		}
		if _, present := wm["secret"]; !present {
			p.errorf(n.Line, "%s needs a secret: a reference to the key its requests are signed with (HMAC-SHA256), like env://FLEET_WEBHOOK_SECRET", path)
		}
		p.secret(wm, path, "secret", &w.Secret)
		p.strList(wm, path, "events", &w.Events, func(s string) string {
			if !slices.Contains(events.Types, s) {
				return "unknown event " + strconv.Quote(s) + "; known: " + strings.Join(events.Types, ", ")
			}
			return ""
		})
		p.str(wm, path, "format", &w.Format, func(s string) string {
			if s != "cloudevents" && s != "slack" {
				return "must be cloudevents or slack, not " + strconv.Quote(s)
			}
			return ""
		})
		if w.URL != "" {
			if first, dup := seen[w.URL]; dup {
				p.errorf(n.Line, "%s has the url of events.webhooks[%d]; one webhook per receiver", path, first)
				continue
			}
			seen[w.URL] = i
		}
		p.c.Events.Webhooks = append(p.c.Events.Webhooks, w)
	}
}

func looksLikeRef(s string) bool {
	return strings.HasPrefix(s, "env://") || strings.HasPrefix(s, "secret://") || strings.HasPrefix(s, "vault://")
}

// checkWebhookURL never quotes the URL: its path may be a credential.
func checkWebhookURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return "is not an http or https URL (nor a secret reference: env://VAR, secret://NAME or vault://PATH#FIELD)"
	case u.User != nil:
		return "has credentials in it; a URL that is a credential belongs in a secret reference (url: env://VAR)"
	}
	return ""
}
