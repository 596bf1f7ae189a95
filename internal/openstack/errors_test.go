package openstack

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
)

func httpErr(status int, body string, header http.Header) error {
	if header == nil {
		header = http.Header{}
	}
	return gophercloud.ErrUnexpectedResponseCode{
		URL: "http://127.0.0.1/v2.0/ports", Method: "POST", Expected: []int{201},
		Actual: status, Body: []byte(body), ResponseHeader: header,
	}
}

func TestErrorClasses(t *testing.T) {
	neutron409 := `{"NeutronError": {"type": "IpAddressAlreadyAllocated", "message": "IP address 10.254.0.3 already allocated in subnet abc", "detail": ""}}`
	cases := []struct {
		name string
		err  error
		want map[string]bool
	}{
		{"404", httpErr(404, `{"NeutronError":{"type":"PortNotFound","message":"Port x could not be found."}}`, nil), map[string]bool{"notfound": true}},
		{"409", httpErr(409, neutron409, nil), map[string]bool{"conflict": true}},
		{"403", httpErr(403, `{"NeutronError":{"type":"PolicyNotAuthorized","message":"no"}}`, nil), map[string]bool{"forbidden": true}},
		{"400", httpErr(400, `{"NeutronError":{"type":"BadRequest","message":"bad"}}`, nil), map[string]bool{"badrequest": true}},
		{"401", httpErr(401, `{"error":{"code":401,"title":"Unauthorized","message":"The request you have made requires authentication."}}`, nil), map[string]bool{"unauthorized": true}},
		{"500", httpErr(500, `oops`, nil), map[string]bool{"transient": true}},
		{"502", httpErr(502, ``, nil), map[string]bool{"transient": true}},
		{"503", httpErr(503, ``, nil), map[string]bool{"transient": true}},
		{"429", httpErr(429, ``, http.Header{"Retry-After": {"7"}}), map[string]bool{"transient": true}},
		{"wrapped 409", fmt.Errorf("ensure port: %w", wrapErr("create port", httpErr(409, neutron409, nil))), map[string]bool{"conflict": true}},
		{"pointer 404", fmt.Errorf("x: %w", &gophercloud.ErrUnexpectedResponseCode{Actual: 404}), map[string]bool{"notfound": true}},
		{"reauth failed 401", &gophercloud.ErrUnableToReauthenticate{ErrOriginal: httpErr(401, "", nil), ErrReauth: httpErr(401, "", nil)}, map[string]bool{"unauthorized": true}},
		{"reauth keystone down", &gophercloud.ErrUnableToReauthenticate{ErrOriginal: httpErr(401, "", nil), ErrReauth: httpErr(503, "", nil)}, map[string]bool{"transient": true}},
		{"after reauth 409", &gophercloud.ErrErrorAfterReauthentication{ErrOriginal: httpErr(409, neutron409, nil)}, map[string]bool{"conflict": true}},
		{"ErrNotFound", fmt.Errorf("resolve router: %w", ErrNotFound), map[string]bool{"notfound": true}},
		{"ErrResourceNotFound", gophercloud.ErrResourceNotFound{Name: "x"}, map[string]bool{"notfound": true}},
		{"deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), map[string]bool{"transient": true}},
		{"canceled", fmt.Errorf("get: %w", context.Canceled), map[string]bool{}},
		{"gophercloud timeout", gophercloud.ErrTimeOut{}, map[string]bool{"transient": true}},
		{"bad cert", fmt.Errorf("get: %w", x509.UnknownAuthorityError{}), map[string]bool{}},
		{"plain", errors.New("something"), map[string]bool{}},
		{"nil", nil, map[string]bool{}},
	}
	classes := map[string]func(error) bool{
		"notfound": IsNotFound, "conflict": IsConflict, "forbidden": IsForbidden,
		"badrequest": IsBadRequest, "unauthorized": IsUnauthorized, "transient": IsTransient,
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for name, f := range classes {
				if got := f(tc.err); got != tc.want[name] {
					t.Errorf("%s(%v) = %v, want %v", name, tc.err, got, tc.want[name])
				}
			}
		})
	}
}

func TestAPIErrorCarriesNeutronTypeAndNoRequestBody(t *testing.T) {
	body := `{"NeutronError": {"type": "DuplicateRbacPolicy", "message": "An RBAC policy already exists with those values.", "detail": ""}}`
	err := wrapErr("share network n1 with project p2", httpErr(409, body, nil))
	if got := NeutronErrorType(err); got != "DuplicateRbacPolicy" {
		t.Fatalf("NeutronErrorType = %q", got)
	}
	if got := NeutronErrorType(httpErr(409, body, nil)); got != "DuplicateRbacPolicy" {
		t.Fatalf("NeutronErrorType on a raw gophercloud error = %q", got)
	}
	msg := err.Error()
	for _, want := range []string{"share network n1 with project p2", "409", "DuplicateRbacPolicy", "already exists"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "{") {
		t.Errorf("message %q carries raw JSON", msg)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.StatusCode != 409 {
		t.Fatalf("want *APIError with 409, got %#v", err)
	}
	if !gophercloud.ResponseCodeIs(err, 409) {
		t.Errorf("gophercloud.ResponseCodeIs must still see through the wrapper")
	}
}

func TestFaultParsing(t *testing.T) {
	cases := []struct {
		body, typ, msg string
		neutron        bool
	}{
		{`{"NeutronError":{"type":"RouterInterfaceNotFound","message":"m1"}}`, "RouterInterfaceNotFound", "m1", true},
		{`{"NeutronError":"plain string"}`, "", "plain string", true},
		{`{"conflictingRequest":{"code":409,"message":"Port p is still in use."}}`, "conflictingRequest", "Port p is still in use.", false},
		{`{"error":{"code":401,"title":"Unauthorized","message":"nope"}}`, "Unauthorized", "nope", false},
		{`not json`, "", "not json", false},
		{``, "", "", false},
	}
	for _, tc := range cases {
		typ, msg, neutron := parseFault([]byte(tc.body))
		if typ != tc.typ || msg != tc.msg || neutron != tc.neutron {
			t.Errorf("parseFault(%q) = %q, %q, %v; want %q, %q, %v", tc.body, typ, msg, neutron, tc.typ, tc.msg, tc.neutron)
		}
	}
	long := `{"NeutronError":{"type":"X","message":"` + strings.Repeat("é", 400) + `"}}`
	_, msg, _ := parseFault([]byte(long))
	if len(msg) > maxMessage+len("…") || !strings.HasSuffix(msg, "…") {
		t.Errorf("long message not truncated: %d bytes", len(msg))
	}
	if NeutronErrorType(wrapErr("x", httpErr(409, `{"conflictingRequest":{"message":"m"}}`, nil))) != "" {
		t.Error("a Nova fault must not read as a Neutron type")
	}
}

func TestRetryAfter(t *testing.T) {
	if got := RetryAfter(wrapErr("x", httpErr(429, "", http.Header{"Retry-After": {"3"}}))); got != 3*time.Second {
		t.Errorf("RetryAfter seconds = %v", got)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := parseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now); got != 90*time.Second {
		t.Errorf("RetryAfter date = %v", got)
	}
	for _, v := range []string{"", "-1", "soon"} {
		if got := parseRetryAfter(v, now); got != 0 {
			t.Errorf("parseRetryAfter(%q) = %v", v, got)
		}
	}
	if RetryAfter(errors.New("x")) != 0 {
		t.Error("RetryAfter of a non-HTTP error must be 0")
	}
}

// Real transport failures, produced by a real HTTP client on loopback.
func TestTransportFailuresAreTransient(t *testing.T) {
	// Connection refused: a port that was just released.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = http.Get("http://" + addr + "/")
	if err == nil || !IsTransient(err) {
		t.Errorf("connection refused: IsTransient(%v) = false", err)
	}

	// Server closes the connection without answering.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	_, err = http.Get(srv.URL)
	if err == nil || !IsTransient(err) {
		t.Errorf("dropped connection: IsTransient(%v) = false", err)
	}

	// Client timeout while the server stalls.
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(block)
	c := &http.Client{Timeout: 50 * time.Millisecond}
	_, err = c.Get(slow.URL)
	if err == nil || !IsTransient(err) {
		t.Errorf("client timeout: IsTransient(%v) = false", err)
	}
}
