package testenv

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// InNewNetns runs f on a locked OS thread inside a fresh network namespace (root; the
// test skips, or fails under BNERD_REQUIRE_DATAPLANE=1, without it). The thread is
// discarded afterwards, never returned to the pool, so no other goroutine runs in the
// namespace. f reports with t.Error and returns: it does not run on the test's goroutine.
func InNewNetns(t *testing.T, f func()) {
	t.Helper()
	NeedRoot(t, "needs root to create a network namespace")
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			t.Error(err)
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		defer func() { _ = netns.Set(orig) }()
		f()
	}()
	<-done
}
