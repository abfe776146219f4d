package gkeemu

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Fault changes the answers to the next calls of a method.
type Fault struct {
	// Method is a discovery method id
	// ("container.projects.locations.clusters.create"), or "" for any API
	// call (token fetches and TokenReviews are never faulted).
	Method string
	// Count is how many calls it applies to; 0 is 1.
	Count int
	// Status, when set, answers the call with this HTTP status and Google's
	// error body for it, without acting: 429 (rate limited), 500, 503, 403
	// (permission), 400.
	Status int
	// RetryAfter goes with a 429: how long to wait, carried as
	// RetryHint says.
	RetryAfter time.Duration
	// RetryHint is where a 429 says RetryAfter: "header" (Retry-After),
	// "details" (a google.rpc.RetryInfo in error.details), "both", or ""
	// for neither. Google's APIs do not document either for GKE: a guess.
	RetryHint string
	// Drop makes the call act and then close the connection without an
	// answer.
	Drop bool
	// Message replaces the error's message.
	Message string
}

// Inject arms a fault.
func (e *Emulator) Inject(f Fault) error {
	if f.Status == 0 && !f.Drop {
		return fmt.Errorf("gkeemu: a fault needs a Status or Drop")
	}
	if f.Status != 0 && f.Drop {
		return fmt.Errorf("gkeemu: a fault either answers a Status or drops the answer")
	}
	if f.Method != "" && !strings.HasPrefix(f.Method, "container.") && !strings.HasPrefix(f.Method, "compute.") {
		return fmt.Errorf("gkeemu: fault method %q is not a discovery method id", f.Method)
	}
	if f.Count <= 0 {
		f.Count = 1
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, f)
	return nil
}

// Throttle answers the next n calls of method with 429 RESOURCE_EXHAUSTED.
func (e *Emulator) Throttle(method string, n int, retryAfter time.Duration, hint string) error {
	return e.Inject(Fault{Method: method, Count: n, Status: http.StatusTooManyRequests, RetryAfter: retryAfter, RetryHint: hint})
}

// FailNext answers the next n calls of method with status.
func (e *Emulator) FailNext(method string, n, status int) error {
	return e.Inject(Fault{Method: method, Count: n, Status: status})
}

// DropAfterActing makes the next n calls of method act and lose their
// answer.
func (e *Emulator) DropAfterActing(method string, n int) error {
	return e.Inject(Fault{Method: method, Count: n, Drop: true})
}

// ClearFaults disarms every fault.
func (e *Emulator) ClearFaults() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = nil
}

// takeFault consumes the first armed fault for a method.
func (e *Emulator) takeFault(method string) *Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.faults {
		f := &e.faults[i]
		if f.Method != "" && f.Method != method {
			continue
		}
		taken := *f
		f.Count--
		if f.Count <= 0 {
			e.faults = append(e.faults[:i], e.faults[i+1:]...)
		}
		return &taken
	}
	return nil
}

// write answers the fault's status with the body the service sends for it.
func (f *Fault) write(w http.ResponseWriter) {
	a := &apiError{code: f.Status, header: http.Header{}}
	switch f.Status {
	case http.StatusTooManyRequests:
		// The text Google's quota system writes for a per-minute limit
		// (GKE's documentation marks the reason rateLimitExceeded as assumed).
		a.status, a.reason = "RESOURCE_EXHAUSTED", "rateLimitExceeded"
		a.message = "Quota exceeded for quota metric 'Mutate requests' and limit 'Mutate requests per minute' of service 'container.googleapis.com'."
		a.details = []map[string]any{{
			"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
			"metadata": map[string]any{"service": "container.googleapis.com", "quota_metric": "container.googleapis.com/mutate_requests", "quota_limit": "MutateRequestsPerMinutePerProject"},
		}}
		if f.RetryAfter > 0 && (f.RetryHint == "header" || f.RetryHint == "both") {
			a.header.Set("Retry-After", strconv.Itoa(int(f.RetryAfter/time.Second)))
		}
		if f.RetryAfter > 0 && (f.RetryHint == "details" || f.RetryHint == "both") {
			a.details = append(a.details, map[string]any{
				"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": strconv.Itoa(int(f.RetryAfter/time.Second)) + "s",
			})
		}
	case http.StatusServiceUnavailable:
		a.status, a.reason, a.message = "UNAVAILABLE", "backendError", "The service is currently unavailable."
	case http.StatusInternalServerError:
		a.status, a.reason, a.message = "INTERNAL", "backendError", "Internal error encountered."
	case http.StatusForbidden:
		a.status, a.reason, a.message = "PERMISSION_DENIED", "forbidden", "The caller does not have permission"
	case http.StatusNotFound:
		a.status, a.reason, a.message = "NOT_FOUND", "notFound", "Not found."
	case http.StatusConflict:
		a.status, a.reason, a.message = "ABORTED", "aborted", "The operation was aborted."
	default:
		a.status, a.reason, a.message = "INVALID_ARGUMENT", "badRequest", "Request contains an invalid argument."
	}
	if f.Message != "" {
		a.message = f.Message
	}
	writeAPIError(w, a)
}

// SetQuota limits a regional quota metric ("CPUS", "NVIDIA_H100_GPUS",
// "PREEMPTIBLE_NVIDIA_H100_GPUS"); node pool creates and resizes that would
// pass it are refused with 403, as GKE checks quota when a request arrives.
func (e *Emulator) SetQuota(region, metric string, limit float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.quotas[region] == nil {
		e.quotas[region] = map[string]float64{}
	}
	e.quotas[region][metric] = limit
}

// Stockout makes a machine type unobtainable in a zone: node pool operations
// that need new machines there end DONE with an error, and the node pool
// shows the GCE_STOCKOUT condition.
func (e *Emulator) Stockout(zone, machineType string, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stockouts[zone+"/"+machineType] = on
}
