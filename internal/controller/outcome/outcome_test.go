package outcome

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"bnerd.net/vpn-operator/internal/openstack"
)

func httpErr(code int, body string, retryAfter string) error {
	h := http.Header{}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	return fmt.Errorf("create port: %w", gophercloud.ErrUnexpectedResponseCode{Actual: code, Body: []byte(body), ResponseHeader: h})
}

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "ipsec.bnerd.net", Resource: "ipsecgateways"}
	for _, c := range []struct {
		name string
		err  error
		want Class
	}{
		{"400", httpErr(400, `{"NeutronError":{"type":"BadRequest","message":"invalid"}}`, ""), Terminal},
		{"401 after re-authentication", httpErr(401, `{"error":{"title":"Unauthorized"}}`, ""), Terminal},
		{"403 policy", httpErr(403, `{"NeutronError":{"type":"PolicyNotAuthorized","message":"rule:create_port is disallowed by policy"}}`, ""), Terminal},
		{"409 Neutron quota", httpErr(409, `{"NeutronError":{"type":"OverQuota","message":"Quota exceeded for resources: ['port']."}}`, ""), Terminal},
		{"413 Nova over limit", httpErr(413, `{"overLimit":{"message":"Quota exceeded"}}`, ""), Terminal},
		{"configured name resolves to nothing", fmt.Errorf("resolve network vpn-transit: %w", openstack.ErrNotFound), Terminal},
		{"ambiguous name", fmt.Errorf("resolve router: %w", openstack.ErrAmbiguous), Terminal},
		{"409 port in use", httpErr(409, `{"NeutronError":{"type":"PortInUse","message":"busy"}}`, ""), Transient},
		{"404 raced", httpErr(404, `{"NeutronError":{"type":"PortNotFound"}}`, ""), Transient},
		{"408", httpErr(408, ``, ""), Transient},
		{"429", httpErr(429, ``, "3"), Transient},
		{"500", httpErr(500, ``, ""), Transient},
		{"503", httpErr(503, ``, ""), Transient},
		{"timeout", fmt.Errorf("get port: %w", context.DeadlineExceeded), Transient},
		{"not an OpenStack error", errors.New("something else"), Transient},
		{"API-server conflict", apierrors.NewConflict(gr, "gw", errors.New("modified")), Conflict},
		{"API-server timeout", apierrors.NewServerTimeout(gr, "get", 1), Transient},
		{"waiting on Nova", Wait(time.Second, "attach requested"), Waiting},
		{"waiting, wrapped", fmt.Errorf("PortAttached: %w", Wait(time.Second, "attach requested")), Waiting},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestResult(t *testing.T) {
	b := NewBackoff(10*time.Millisecond, time.Second)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gw"}}
	resync := 5 * time.Minute

	if res, err := b.Result(req, nil, resync); err != nil || res.RequeueAfter != resync {
		t.Errorf("converged: %+v %v", res, err)
	}
	if res, err := b.Result(req, Wait(2*time.Second, "attach"), resync); err != nil || res.RequeueAfter != 2*time.Second {
		t.Errorf("waiting: %+v %v", res, err)
	}
	refused := httpErr(403, `{"NeutronError":{"type":"PolicyNotAuthorized"}}`, "")
	if res, err := b.Result(req, refused, resync); err != nil || res.RequeueAfter != resync {
		t.Errorf("a refusal must wait for the resync without an error: %+v %v", res, err)
	}
	transient := httpErr(503, ``, "")
	if res, err := b.Result(req, transient, resync); err == nil || res.RequeueAfter != 0 {
		t.Errorf("a transient failure must return the error for the backoff: %+v %v", res, err)
	}
}

// The backoff doubles per failure, and a Retry-After sets the least delay of the next
// attempt only.
func TestBackoffHonoursRetryAfter(t *testing.T) {
	b := NewBackoff(10*time.Millisecond, time.Second)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "x"}}
	if d := b.When(req); d != 10*time.Millisecond {
		t.Fatalf("first delay %s", d)
	}
	if d := b.When(req); d != 20*time.Millisecond {
		t.Fatalf("second delay %s", d)
	}
	if _, err := b.Result(req, httpErr(429, ``, "3"), time.Minute); err == nil {
		t.Fatal("429 must be returned as an error")
	}
	if d := b.When(req); d != 3*time.Second {
		t.Fatalf("delay after Retry-After 3: %s", d)
	}
	if d := b.When(req); d != 80*time.Millisecond {
		t.Fatalf("the Retry-After floor applies once; then the backoff goes on: %s", d)
	}
	b.Forget(req)
	if d := b.When(req); d != 10*time.Millisecond {
		t.Fatalf("after Forget: %s", d)
	}
	if n := b.NumRequeues(req); n != 1 {
		t.Fatalf("requeues %d", n)
	}
}

func TestDescribe(t *testing.T) {
	if got := Describe(httpErr(403, `{"NeutronError":{"type":"PolicyNotAuthorized","message":"no"}}`, "")); !strings.Contains(got, "refused: not retried until the spec") {
		t.Errorf("refusal: %s", got)
	}
	if got := Describe(httpErr(503, ``, "")); !strings.Contains(got, "retrying with backoff") {
		t.Errorf("transient: %s", got)
	}
}
