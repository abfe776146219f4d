package eksemu

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The emulator checks SigV4 itself, from the specification (canonical
// request, string to sign, derived key), rather than by asking the SDK's
// signer to sign again: an adapter that signed wrongly must be refused, and
// a check made with the code that signed would agree with any mistake.

const sigAlgorithm = "AWS4-HMAC-SHA256"

// user is an access key the emulator accepts: a long-term key of an IAM
// user or role holder, or temporary credentials from AssumeRole.
type user struct {
	akid, secret string
	// arn is what GetCallerIdentity answers; iamArn is the IAM principal
	// access entries name (the role's ARN, path included, for a session).
	arn, iamArn, userID string
	// session is the session token of temporary credentials, with their
	// expiry on the emulator's clock.
	session string
	expires time.Time
}

// role is an IAM role that listed principals may assume.
type role struct {
	arn     string
	trusted map[string]bool
}

// principal is who signed a request.
type principal struct {
	arn, iamArn, userID, account string
}

// AddUser makes an access key valid. arn is its IAM identity
// ("arn:aws:iam::111111111111:user/fleet" or a role holder's
// "arn:aws:iam::111111111111:role/ops/fleet").
func (e *Emulator) AddUser(accessKeyID, secret, arn string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.users[accessKeyID] = &user{akid: accessKeyID, secret: secret, arn: arn, iamArn: arn, userID: "AIDA" + strings.ToUpper(hex.EncodeToString([]byte(accessKeyID)))[:16]}
}

// AddRole makes a role that the principals trusted (IAM ARNs of users or
// roles) may assume.
func (e *Emulator) AddRole(roleArn string, trusted ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &role{arn: roleArn, trusted: map[string]bool{}}
	for _, t := range trusted {
		r.trusted[t] = true
	}
	e.roles[roleArn] = r
}

// authFailure is the error a service gives for each way a signature fails.
type authFailure struct {
	status int
	code   string
}

// Guess: the codes EC2 gives for a bad key and a bad signature are taken as
// AuthFailure (401) for both; EKS and STS codes are the ones their SDKs
// surface as unmodeled errors.
var authFailures = map[string]map[string]authFailure{
	"eks": {
		"missing": {403, "MissingAuthenticationTokenException"}, "unknownKey": {403, "UnrecognizedClientException"},
		"signature": {403, "InvalidSignatureException"}, "expired": {403, "ExpiredTokenException"},
	},
	"ec2": {
		"missing": {401, "AuthFailure"}, "unknownKey": {401, "AuthFailure"},
		"signature": {401, "AuthFailure"}, "expired": {400, "RequestExpired"},
	},
	"sts": {
		"missing": {403, "MissingAuthenticationToken"}, "unknownKey": {403, "InvalidClientTokenId"},
		"signature": {403, "SignatureDoesNotMatch"}, "expired": {403, "ExpiredToken"},
	},
	// Guess: Auto Scaling is awsQuery like STS and answers as STS does.
	"autoscaling": {
		"missing": {403, "MissingAuthenticationToken"}, "unknownKey": {403, "InvalidClientTokenId"},
		"signature": {403, "SignatureDoesNotMatch"}, "expired": {403, "ExpiredToken"},
	},
}

var authMessages = map[string]string{
	"missing":    "Missing Authentication Token",
	"unknownKey": "The security token included in the request is invalid.",
	"signature":  "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.",
	"expired":    "The security token included in the request is expired",
}

// authenticate checks a header-signed request. It returns the principal,
// or the status, code and message of the refusal. Called with mu held.
//
// The signing time is not compared with the emulator's clock: the SDK signs
// with the wall clock while tests move a fake one. Temporary credentials do
// expire on the emulator's clock.
func (e *Emulator) authenticate(r *http.Request, body []byte, service string) (*principal, int, string, string) {
	refuse := func(kind string) (*principal, int, string, string) {
		f := authFailures[service][kind]
		return nil, f.status, f.code, authMessages[kind]
	}
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, sigAlgorithm+" ") {
		return refuse("missing")
	}
	fields := map[string]string{}
	for _, part := range strings.Split(strings.TrimPrefix(auth, sigAlgorithm+" "), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return refuse("missing")
	}
	u := e.users[scope[0]]
	if u == nil {
		return refuse("unknownKey")
	}
	if scope[2] != e.opts.Region || scope[3] != service {
		return refuse("signature")
	}
	date := r.Header.Get("X-Amz-Date")
	if !strings.HasPrefix(date, scope[1]) {
		return refuse("signature")
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	if !slices.Contains(signed, "host") {
		return refuse("signature")
	}
	headerValue := func(name string) string {
		switch name {
		case "host":
			return r.Host
		case "content-length":
			return strconv.FormatInt(r.ContentLength, 10)
		}
		vals := r.Header.Values(name)
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		return strings.Join(vals, ",")
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return refuse("signature")
	}
	h := sha256.Sum256(body)
	creq := canonicalRequest(r.Method, r.URL.EscapedPath(), query, signed, headerValue, hex.EncodeToString(h[:]))
	want := signature(u.secret, date, strings.Join(scope[1:], "/"), scope[1], scope[2], scope[3], creq)
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return refuse("signature")
	}
	if u.session != "" {
		if r.Header.Get("X-Amz-Security-Token") != u.session || !slices.Contains(signed, "x-amz-security-token") {
			return refuse("unknownKey")
		}
		if !e.now().Before(u.expires) {
			return refuse("expired")
		}
	}
	return &principal{arn: u.arn, iamArn: u.iamArn, userID: u.userID, account: e.opts.AccountID}, 0, "", ""
}

// presigned is a checked presigned GetCallerIdentity URL.
type presigned struct {
	p       *principal
	signed  time.Time
	expires time.Time
}

// tokenLifetime is the longest a presigned token lives, whatever its
// X-Amz-Expires says: aws-iam-authenticator's 15 minutes.
const tokenLifetime = 15 * time.Minute

// checkPresigned verifies a presigned STS GetCallerIdentity URL for the
// cluster named in x-k8s-aws-id: its signature with the key it names, and
// its expiry on the emulator's clock. Called with mu held.
//
// Guess: a token is taken to expire at X-Amz-Date plus the smaller of
// X-Amz-Expires and 15 minutes; the authenticator documents the 15 minutes
// and says X-Amz-Expires is ignored by STS, so a real token may outlive the
// 600 s the adapter promises. The adapter reports the shorter of the two.
func (e *Emulator) checkPresigned(raw, clusterName string) (*presigned, string) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "the token is not a URL"
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, "the token's query does not parse"
	}
	if q.Get("Action") != "GetCallerIdentity" || q.Get("Version") != "2011-06-15" || u.Path != "/" && u.Path != "" {
		return nil, "the token is not a presigned sts:GetCallerIdentity"
	}
	if q.Get("X-Amz-Algorithm") != sigAlgorithm {
		return nil, "the token is not signed with " + sigAlgorithm
	}
	scope := strings.Split(q.Get("X-Amz-Credential"), "/")
	if len(scope) != 5 || scope[3] != "sts" || scope[4] != "aws4_request" || scope[2] != e.opts.Region {
		return nil, "the token's credential scope is not sts in " + e.opts.Region
	}
	usr := e.users[scope[0]]
	if usr == nil {
		return nil, "the token is signed with a key the emulator does not know"
	}
	signed := strings.Split(q.Get("X-Amz-SignedHeaders"), ";")
	if !slices.Contains(signed, "host") || !slices.Contains(signed, "x-k8s-aws-id") {
		return nil, "the token does not sign host and x-k8s-aws-id"
	}
	date := q.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", date)
	if err != nil || !strings.HasPrefix(date, scope[1]) {
		return nil, "the token's X-Amz-Date is malformed"
	}
	expires, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || expires < 0 || expires > int(tokenLifetime/time.Second) {
		return nil, "the token's X-Amz-Expires is not between 0 and 900"
	}
	sig := q.Get("X-Amz-Signature")
	q.Del("X-Amz-Signature")
	headerValue := func(name string) string {
		switch name {
		case "host":
			return u.Host
		case "x-k8s-aws-id":
			return clusterName
		}
		return ""
	}
	empty := sha256.Sum256(nil)
	creq := canonicalRequest(http.MethodGet, u.EscapedPath(), q, signed, headerValue, hex.EncodeToString(empty[:]))
	want := signature(usr.secret, date, strings.Join(scope[1:], "/"), scope[1], scope[2], scope[3], creq)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return nil, "the token's signature does not match (another key, or another cluster)"
	}
	if usr.session != "" && q.Get("X-Amz-Security-Token") != usr.session {
		return nil, "the token's session token is not the key's"
	}
	lifetime := min(time.Duration(expires)*time.Second, tokenLifetime)
	until := at.Add(lifetime)
	if usr.session != "" && usr.expires.Before(until) {
		until = usr.expires
	}
	now := e.now()
	if !now.Before(until) {
		return nil, "the token expired"
	}
	if now.Add(5 * time.Minute).Before(at) {
		return nil, "the token is signed in the future"
	}
	return &presigned{p: &principal{arn: usr.arn, iamArn: usr.iamArn, userID: usr.userID, account: e.opts.AccountID}, signed: at, expires: until}, ""
}

// canonicalRequest builds SigV4's canonical request. path is the request's
// path as sent (escaped); SigV4 for services other than S3 escapes it once
// more. header gives the value of a signed header.
func canonicalRequest(method, path string, query url.Values, signed []string, header func(string) string, payloadHash string) string {
	if path == "" {
		path = "/"
	}
	var b strings.Builder
	b.WriteString(method)
	b.WriteByte('\n')
	b.WriteString(sigEscape(path, false))
	b.WriteByte('\n')
	keys := make([]string, 0, len(query))
	for k := range query {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	first := true
	for _, k := range keys {
		vals := append([]string(nil), query[k]...)
		sort.Strings(vals)
		for _, v := range vals {
			if !first {
				b.WriteByte('&')
			}
			first = false
			b.WriteString(sigEscape(k, true))
			b.WriteByte('=')
			b.WriteString(sigEscape(v, true))
		}
	}
	b.WriteByte('\n')
	for _, h := range signed {
		b.WriteString(h)
		b.WriteByte(':')
		b.WriteString(strings.TrimSpace(header(h)))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(strings.Join(signed, ";"))
	b.WriteByte('\n')
	b.WriteString(payloadHash)
	return b.String()
}

// sigEscape percent-encodes every byte but the unreserved ones (and "/"
// unless slash is set), upper-case, as SigV4 specifies.
func sigEscape(s string, slash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && !slash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// signature is SigV4's signature of a canonical request.
func signature(secret, amzDate, scope, day, region, service, creq string) string {
	h := sha256.Sum256([]byte(creq))
	toSign := sigAlgorithm + "\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(h[:])
	k := hmacSHA256([]byte("AWS4"+secret), day)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, toSign))
}
