package aws

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/fleet-agent/fleet-agent/internal/providers"
)

// What each error code of EKS, EC2 and STS means for the journal. Codes are
// matched whatever the service (EKS's error registry is service-wide, and
// EC2 and STS only ever give generic errors): the code, then the status,
// decide.
var (
	throttleCodes = set("ThrottlingException", "TooManyRequestsException", "Throttling", "RequestLimitExceeded",
		"RequestThrottled", "RequestThrottledException", "SlowDown", "ProvisionedThroughputExceededException", "PriorRequestNotComplete")
	notFoundCodes = set("ResourceNotFoundException", "NotFoundException", "InvalidSubnetID.NotFound", "InvalidInstanceType", "NoSuchEntity")
	conflictCodes = set("ResourceInUseException", "ResourcePropagationDelayException", "IncorrectState", "ConcurrentModificationException")
	invalidCodes  = set("InvalidParameterException", "InvalidRequestException", "ClientException", "BadRequestException",
		"ValidationException", "ValidationError", "InvalidParameterValue", "InvalidParameterCombination", "MissingParameter",
		"UnknownParameter", "InvalidAction", "MalformedQueryString", "SerializationException", "UnknownOperationException",
		"UnsupportedAvailabilityZoneException", "InvalidStateException")
	credentialCodes = set("UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException", "SignatureDoesNotMatch",
		"AuthFailure", "ExpiredToken", "ExpiredTokenException", "MissingAuthenticationToken", "MissingAuthenticationTokenException",
		"IncompleteSignature", "RequestExpired", "InvalidAccessKeyId")
	permissionCodes = set("AccessDeniedException", "AccessDenied", "UnauthorizedOperation", "OptInRequired", "RegionDisabledException")
	quotaCodes      = set("ResourceLimitExceededException", "LimitExceededException", "VcpuLimitExceeded", "InstanceLimitExceeded")
	serverCodes     = set("ServerException", "ServiceUnavailableException", "ServiceUnavailable", "InternalError", "InternalFailure",
		"Unavailable", "InternalServerError")
)

func set(codes ...string) map[string]bool {
	m := make(map[string]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}

// fail maps an SDK error of one call to the boundary's error. write says
// whether the call could change something at the provider: a failed read
// never has a side effect.
func (s *session) fail(call string, write bool, err error) error {
	e := classify(call, write, err)
	e.Op = s.op
	e.Message = s.redact.Redact(e.Message)
	e.Err = &redacted{err: err, redact: s.redact}
	return e
}

// redacted keeps an SDK error for errors.As while its text loses every
// secret value the call saw.
type redacted struct {
	err    error
	redact interface{ Redact(string) string }
}

func (r *redacted) Error() string { return r.redact.Redact(r.err.Error()) }
func (r *redacted) Unwrap() error { return r.err }

// maybe is the side effect of a failure whose outcome is not known.
func maybe(write bool) providers.SideEffect {
	if write {
		return providers.Maybe
	}
	return providers.None
}

func classify(call string, write bool, err error) *providers.Error {
	var api smithy.APIError
	var resp *awshttp.ResponseError
	status, rid := 0, ""
	if errors.As(err, &resp) {
		status, rid = resp.HTTPStatusCode(), resp.ServiceRequestID()
	}
	if !errors.As(err, &api) {
		return transport(call, write, status, err)
	}
	code, msg := api.ErrorCode(), api.ErrorMessage()
	assuming := assumeRoleFailed(err)
	if assuming {
		call = "AssumeRole"
	}
	text := fmt.Sprintf("%s %s: %s: %s", service(call), call, code, msg)
	if status != 0 {
		text += fmt.Sprintf(" (HTTP %d", status)
		if rid != "" {
			text += ", request " + rid
		}
		text += ")"
	}
	e := &providers.Error{Message: text, SideEffect: providers.None}
	switch {
	case throttleCodes[code] || status == http.StatusTooManyRequests:
		e.Class, e.RetryAfter = providers.Throttled, retryAfter(resp)
	case notFoundCodes[code]:
		e.Class = providers.NotFound
	case code == "InvalidRequestException" && busyText(msg):
		// EKS says a cluster that is not ACTIVE yet is an invalid request
		// ("Cluster 'x' is not in ACTIVE status"); it is busy, not wrong.
		e.Class = providers.Conflict
	case conflictCodes[code] || status == http.StatusConflict:
		e.Class = providers.Conflict
	case quotaCodes[code]:
		e.Class, e.Reason = providers.Terminal, "quota"
		e.Message += "; raise the quota (Service Quotas) or free capacity"
	case credentialCodes[code]:
		e.Class, e.Reason = providers.Terminal, "credentialsRefused"
		e.Message += "; fix the account's accessKeyId and secretAccessKey"
	case permissionCodes[code]:
		e.Class, e.Reason = providers.Terminal, "permission"
		e.Message += "; grant the account's principal this permission"
	case invalidCodes[code]:
		e.Class = providers.Invalid
		if code == "UnsupportedAvailabilityZoneException" {
			e.Reason = "zone"
		}
	case serverCodes[code] || status >= 500:
		e.Class, e.SideEffect = providers.Unavailable, maybe(write)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Class, e.Reason = providers.Terminal, "credentialsRefused"
	default:
		// A code we do not know: retryable, and it may have happened.
		e.Class, e.SideEffect = providers.Unknown, maybe(write)
	}
	if e.Class == providers.Terminal && assuming {
		// STS refused to hand out the role's keys: the account's roleArn or
		// its trust policy is what a person must fix.
		e.Reason = "credentialsRefused"
		e.Message += " (while assuming the account's roleArn)"
	}
	return e
}

// assumeRoleFailed reports whether the call failed because STS would not
// hand out the account's roleArn keys.
func assumeRoleFailed(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if oe, ok := e.(*smithy.OperationError); ok && oe.OperationName == "AssumeRole" {
			return true
		}
	}
	return false
}

func busyText(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "not in active status") || strings.Contains(m, "not in active state") || strings.Contains(m, "currently being")
}

// transport classifies an error that carries no service answer.
func transport(call string, write bool, status int, err error) *providers.Error {
	text := fmt.Sprintf("%s %s: %v", service(call), call, err)
	var op *net.OpError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return &providers.Error{Class: providers.Unavailable, SideEffect: maybe(write), Message: text}
	case errors.As(err, &op) && op.Op == "dial":
		// Nothing reached the service.
		return &providers.Error{Class: providers.Unavailable, SideEffect: providers.None, Message: text}
	case status >= 500:
		return &providers.Error{Class: providers.Unavailable, SideEffect: maybe(write), Message: text}
	}
	// A reset connection, a truncated answer: nothing is known.
	return &providers.Error{Class: providers.Unknown, SideEffect: maybe(write), Message: text}
}

// retryAfter reads the wait a throttled answer asked for: Retry-After
// (seconds or an HTTP date) or x-amz-retry-after (milliseconds).
func retryAfter(resp *awshttp.ResponseError) time.Duration {
	if resp == nil || resp.Response == nil {
		return 0
	}
	h := resp.Response.Header
	if v := h.Get("x-amz-retry-after"); v != "" {
		if ms, err := strconv.Atoi(v); err == nil && ms > 0 {
			return time.Duration(ms) * time.Millisecond
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s > 0 {
			return time.Duration(s) * time.Second
		}
		if t, err := http.ParseTime(v); err == nil {
			if d := time.Until(t); d > 0 {
				return d
			}
		}
	}
	return 0
}

var ec2Calls = set("DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSubnets")
var stsCalls = set("GetCallerIdentity", "AssumeRole", "PresignGetCallerIdentity")

func service(call string) string {
	switch {
	case ec2Calls[call]:
		return "EC2"
	case stsCalls[call]:
		return "STS"
	}
	return "EKS"
}
