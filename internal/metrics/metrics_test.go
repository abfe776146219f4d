package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleet-agent/fleet-agent/internal/metrics"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPostsDroppedByKindAndReason(t *testing.T) {
	counts := map[[2]string]uint64{{"sticky", "content_limited"}: 1, {"status", "validation"}: 3}
	m := metrics.New(&metrics.Outbox{
		Depth: func() int { return 2 },
		Posts: func() (uint64, uint64, uint64) { return 5, 4, 9 },
		Drops: func(fn func(kind, reason string, n uint64)) {
			for k, n := range counts {
				fn(k[0], k[1], n)
			}
		},
	})
	text := scrape(t, m)
	for _, want := range []string{
		`fleet_agent_posts_dropped_total{kind="status",reason="validation"} 3`,
		`fleet_agent_posts_dropped_total{kind="sticky",reason="content_limited"} 1`,
		`fleet_agent_posts_total{result="dropped"} 4`,
		`fleet_agent_outbox_depth 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %s in\n%s", want, text)
		}
	}
	// Read at scrape time: a new drop shows on the next scrape.
	counts[[2]string{"once", "not_found"}] = 1
	if !strings.Contains(scrape(t, m), `fleet_agent_posts_dropped_total{kind="once",reason="not_found"} 1`) {
		t.Error("a drop after the first scrape is missing")
	}
}

func TestNoDropsFuncNoSeries(t *testing.T) {
	m := metrics.New(&metrics.Outbox{Depth: func() int { return 0 }, Posts: func() (uint64, uint64, uint64) { return 0, 0, 0 }})
	if strings.Contains(scrape(t, m), "fleet_agent_posts_dropped_total") {
		t.Error("a series without a source")
	}
}
