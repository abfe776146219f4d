package config

import (
	"slices"
	"strings"
	"testing"
)

func TestEventsWebhooks(t *testing.T) {
	c := mustParse(t, `
events:
  webhooks:
    - url: https://hooks.example.com/fleet
      secret: env://HOOK_SECRET
      events: [applied, drifted]
    - url: env://SLACK_URL
      secret: secret://slack-hmac
      format: slack
`)
	w := c.Events.Webhooks
	if len(w) != 2 || w[0].URL != "https://hooks.example.com/fleet" || w[0].Secret != "env://HOOK_SECRET" ||
		!slices.Equal(w[0].Events, []string{"applied", "drifted"}) || w[0].Format != "" ||
		w[1].URL != "env://SLACK_URL" || w[1].Format != "slack" {
		t.Fatalf("webhooks = %+v", w)
	}
	var keys []string
	for _, r := range c.SecretRefs() {
		keys = append(keys, r.Key)
	}
	for _, k := range []string{"events.webhooks[0].secret", "events.webhooks[1].url", "events.webhooks[1].secret"} {
		if !slices.Contains(keys, k) {
			t.Errorf("secret references %v lack %s", keys, k)
		}
	}
}

func TestEventsWebhooksBad(t *testing.T) {
	const canary = "s3cr3t-canary"
	cases := []struct{ text, want string }{
		{"events:\n  webhooks: {}", "events.webhooks must be a list"},
		{"events:\n  webhooks:\n    - secret: env://K", "needs a url"},
		{"events:\n  webhooks:\n    - url: https://h.example.com/x", "needs a secret"},
		{"events:\n  webhooks:\n    - url: https://h.example.com/x\n      secret: " + canary, "must be a secret reference"},
		{"events:\n  webhooks:\n    - url: ftp://h.example.com/" + canary + "\n      secret: env://K", "is not an http or https URL"},
		{"events:\n  webhooks:\n    - url: https://u:" + canary + "@h.example.com/\n      secret: env://K", "has credentials in it"},
		{"events:\n  webhooks:\n    - url: https://h.example.com/x\n      secret: env://K\n      events: [apply]", `unknown event "apply"`},
		{"events:\n  webhooks:\n    - url: https://h.example.com/x\n      secret: env://K\n      format: teams", "must be cloudevents or slack"},
		{"events:\n  webhooks:\n    - url: https://h.example.com/x\n      secret: env://K\n      sign: true", `unknown key "sign"`},
		{"events:\n  webhooks:\n    - {url: 'https://h.example.com/x', secret: 'env://K'}\n    - {url: 'https://h.example.com/x', secret: 'env://J'}", "one webhook per receiver"},
	}
	for _, tc := range cases {
		ps := parseErr(t, tc.text)
		msg := ps.Error()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.text, msg, tc.want)
		}
		if strings.Contains(msg, canary) {
			t.Errorf("%q: the message repeats the secret: %q", tc.text, msg)
		}
	}
}
