package interop

import (
	"bytes"
	"context"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
)

// startChromium starts headless Chromium (bin) for the test and returns the
// context of its first tab; chromedp.NewContext on it opens more tabs. The
// browser and its helpers are killed at cleanup, and its output is logged
// when the test failed.
func startChromium(t *testing.T, bin string, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	var (
		mu      sync.Mutex
		out     bytes.Buffer
		browser *exec.Cmd
	)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox, // we may run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		// Offline machine: without these Chromium waits on the network.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.CombinedOutput(lockedWriter{&mu, &out}),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			if cmd.SysProcAttr == nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{}
			}
			cmd.SysProcAttr.Setpgid = true
			browser = cmd
		}),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		// Chromium's helpers (zygote, renderers) are in its process group.
		if browser != nil && browser.Process != nil {
			syscall.Kill(-browser.Process.Pid, syscall.SIGKILL)
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("Chromium output:\n%s", tail(out.String(), 4000))
			mu.Unlock()
		}
	})
	// Start the browser and the tab now, bound to bctx: an action run first
	// on a shorter-lived child context would tie the tab to that context.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return bctx
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
