package openstack

import (
	"net/http"

	"golang.org/x/time/rate"
)

// rateLimited paces every request of one client set (Keystone, Neutron and Nova
// together) with a token bucket, so a burst of reconciles never exceeds what the cloud
// admits: a request over a cloud's rate limit costs a 429 and a Retry-After wait, a
// request held here costs only the wait.
type rateLimited struct {
	next    http.RoundTripper
	limiter *rate.Limiter
}

func (t rateLimited) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(req.Context()); err != nil {
		return nil, err
	}
	return t.next.RoundTrip(req)
}

// withRateLimit wraps next when qps > 0; burst < 1 means 1.
func withRateLimit(next http.RoundTripper, qps float64, burst int) http.RoundTripper {
	if qps <= 0 {
		return next
	}
	if burst < 1 {
		burst = 1
	}
	return rateLimited{next: next, limiter: rate.NewLimiter(rate.Limit(qps), burst)}
}
