package openstack

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/time/rate"
)

// A cloud admitting 5 requests at once: 12 concurrent requests through an unpaced
// client are partly refused, through a client paced at the cloud's rate none are.
func TestRateLimitKeepsUnderTheCloudsLimit(t *testing.T) {
	var refused atomic.Int32
	cloud := rate.NewLimiter(rate.Limit(20), 5)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cloud.Allow() {
			refused.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	burst := func(rt http.RoundTripper) int32 {
		refused.Store(0)
		c := http.Client{Transport: rt}
		var wg sync.WaitGroup
		for i := 0; i < 12; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}()
		}
		wg.Wait()
		return refused.Load()
	}
	if n := burst(withRateLimit(http.DefaultTransport, 0, 0)); n == 0 {
		t.Fatal("the unpaced burst was never refused: the test cloud's limit does not bite")
	}
	cloud = rate.NewLimiter(rate.Limit(20), 5) // full again
	if n := burst(withRateLimit(http.DefaultTransport, 15, 5)); n != 0 {
		t.Fatalf("paced at 15/s with burst 5 under a 20/s, burst 5 limit: %d refused", n)
	}
}
