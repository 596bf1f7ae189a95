package openstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gophercloud/gophercloud/v2"
)

var (
	// ErrNotFound marks a lookup by name, address or tag that matched nothing.
	// IsNotFound also matches it.
	ErrNotFound = errors.New("not found")
	// ErrAmbiguous marks a lookup by name that matched more than one object.
	ErrAmbiguous = errors.New("ambiguous name")
	// ErrUnfiltered is returned instead of listing a whole collection.
	ErrUnfiltered = errors.New("refusing an unfiltered list")
)

// maxMessage bounds how much of a server's message an error carries, so a
// misbehaving endpoint cannot flood conditions and logs.
const maxMessage = 300

// APIError is an OpenStack refusal with the operation that caused it. It
// carries the server's own error type and message, never the request body
// (which may hold credentials). Unwrap yields the gophercloud error.
type APIError struct {
	Op         string
	StatusCode int
	// Type is Neutron's error type (e.g. "IpAddressAlreadyAllocated"),
	// Nova's fault key (e.g. "conflictingRequest") or Keystone's title.
	Type       string
	Message    string
	RetryAfter time.Duration
	neutron    bool
	err        error
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	fmt.Fprintf(&b, ": HTTP %d", e.StatusCode)
	if e.Type != "" {
		fmt.Fprintf(&b, " %s", e.Type)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

func (e *APIError) Unwrap() error { return e.err }

// wrapErr names the failed operation. op must not contain secrets.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if code, ok := responseError(err); ok {
		ae := &APIError{Op: op, StatusCode: code.Actual, err: err}
		ae.Type, ae.Message, ae.neutron = parseFault(code.Body)
		ae.RetryAfter = parseRetryAfter(code.ResponseHeader.Get("Retry-After"), time.Now())
		return ae
	}
	return fmt.Errorf("%s: %w", op, err)
}

// responseError digs the HTTP failure out of err, including the shapes
// gophercloud uses around re-authentication (which do not all unwrap).
func responseError(err error) (*gophercloud.ErrUnexpectedResponseCode, bool) {
	var v gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &v) {
		return &v, true
	}
	var p *gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &p) && p != nil {
		return p, true
	}
	var reauth *gophercloud.ErrUnableToReauthenticate
	if errors.As(err, &reauth) && reauth != nil {
		if c, ok := responseError(reauth.ErrReauth); ok {
			return c, true
		}
		return responseError(reauth.ErrOriginal)
	}
	var reauthV gophercloud.ErrUnableToReauthenticate
	if errors.As(err, &reauthV) {
		if c, ok := responseError(reauthV.ErrReauth); ok {
			return c, true
		}
		return responseError(reauthV.ErrOriginal)
	}
	return nil, false
}

// StatusCode returns the HTTP status of an OpenStack refusal in err's
// chain, or 0 when err is not one.
func StatusCode(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	if c, ok := responseError(err); ok {
		return c.Actual
	}
	return 0
}

func IsNotFound(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNotFound) {
		return true
	}
	var rnf gophercloud.ErrResourceNotFound
	return StatusCode(err) == http.StatusNotFound || errors.As(err, &rnf)
}

func IsConflict(err error) bool     { return StatusCode(err) == http.StatusConflict }
func IsForbidden(err error) bool    { return StatusCode(err) == http.StatusForbidden }
func IsBadRequest(err error) bool   { return StatusCode(err) == http.StatusBadRequest }
func IsUnauthorized(err error) bool { return StatusCode(err) == http.StatusUnauthorized }

// IsRuleExists reports Neutron's refusal of a security-group rule that the group
// already holds. Not every 409 means that: a quota refusal is 409 OverQuota too.
func IsRuleExists(err error) bool {
	return IsConflict(err) && NeutronErrorType(err) == "SecurityGroupRuleExists"
}

// IsTransient reports failures worth retrying with backoff: server errors,
// rate limiting, timeouts and broken connections. Refusals (4xx) and
// certificate failures are not transient: retrying them changes nothing.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if code := StatusCode(err); code != 0 {
		return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if isCertificateError(err) {
		return false
	}
	var gto gophercloud.ErrTimeOut
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &gto) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	// Anything else the HTTP transport reports (the request never got an
	// answer) is a connectivity problem.
	var ue *url.Error
	return errors.As(err, &ue)
}

func isCertificateError(err error) bool {
	var (
		ua  x509.UnknownAuthorityError
		ci  x509.CertificateInvalidError
		hn  x509.HostnameError
		cve *tls.CertificateVerificationError
	)
	return errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &hn) || errors.As(err, &cve)
}

// RetryAfter returns the delay a 429/503 answer asked for, or 0.
func RetryAfter(err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	if c, ok := responseError(err); ok {
		return parseRetryAfter(c.ResponseHeader.Get("Retry-After"), time.Now())
	}
	return 0
}

func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// NeutronErrorType returns the "type" of a Neutron fault in err's chain
// (e.g. "DuplicateRbacPolicy", "IpAddressAlreadyAllocated"), or "".
func NeutronErrorType(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		if ae.neutron {
			return ae.Type
		}
		return ""
	}
	if c, ok := responseError(err); ok {
		if typ, _, neutron := parseFault(c.Body); neutron {
			return typ
		}
	}
	return ""
}

// parseFault understands the fault envelopes of Neutron
// ({"NeutronError": {"type", "message"}}), Nova ({"<fault>": {"message"}})
// and Keystone ({"error": {"title", "message"}}).
func parseFault(body []byte) (typ, msg string, neutron bool) {
	var env map[string]json.RawMessage
	if json.Unmarshal(body, &env) != nil {
		return "", truncate(strings.TrimSpace(string(body))), false
	}
	if raw, ok := env["NeutronError"]; ok {
		var ne struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &ne) == nil {
			return ne.Type, truncate(ne.Message), true
		}
		// Some Neutron versions send a bare string.
		var s string
		_ = json.Unmarshal(raw, &s)
		return "", truncate(s), true
	}
	if raw, ok := env["error"]; ok {
		var ke struct {
			Title   string `json:"title"`
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &ke) == nil {
			return ke.Title, truncate(ke.Message), false
		}
	}
	if len(env) == 1 {
		for k, raw := range env {
			var nf struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(raw, &nf) == nil {
				return k, truncate(nf.Message), false
			}
		}
	}
	return "", "", false
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
