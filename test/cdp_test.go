package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// cdp is a headless Chromium driven through the DevTools protocol over
// --remote-debugging-pipe: JSON messages, each ended by a NUL byte, written
// to the browser's fd 3 and read from its fd 4. A pipe needs no websocket
// client and opens no port.
type cdp struct {
	t       *testing.T
	cmd     *exec.Cmd
	w       io.Writer
	stderr  syncBuffer
	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpMsg
	events  []cdpMsg
	done    chan struct{}
}

type cdpMsg struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startCDP starts headless Chromium that resolves no name but loopback:
// a page that reached for another origin would fail to, and the test sees
// the request in the Network events.
func startCDP(t *testing.T, chromium string) *cdp {
	t.Helper()
	toBrowser, browserIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	browserOut, fromBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &cdp{t: t, w: browserIn, waiting: map[int]chan cdpMsg{}, done: make(chan struct{})}
	c.cmd = exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir="+t.TempDir(),
		"--remote-debugging-pipe", "--no-first-run", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
		`--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1`, "--window-size=1280,1600", "about:blank")
	c.cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser}
	c.cmd.Stdout, c.cmd.Stderr = &c.stderr, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toBrowser.Close()
	fromBrowser.Close()
	go c.read(browserOut)
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		browserIn.Close()
		<-c.done
	})
	return c
}

func (c *cdp) read(r io.Reader) {
	defer close(c.done)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMsg
		if json.Unmarshal(line[:len(line)-1], &m) != nil {
			continue
		}
		c.mu.Lock()
		if ch, ok := c.waiting[m.ID]; ok && m.ID != 0 {
			delete(c.waiting, m.ID)
			ch <- m
		} else if m.Method != "" {
			c.events = append(c.events, m)
		}
		c.mu.Unlock()
	}
}

// call sends one command (to session, or the browser when empty) and
// returns its result.
func (c *cdp) call(session, method string, params any, out any) {
	c.t.Helper()
	if params == nil {
		params = struct{}{}
	}
	p, _ := json.Marshal(params)
	ch := make(chan cdpMsg, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.waiting[id] = ch
	msg, _ := json.Marshal(cdpMsg{ID: id, Method: method, SessionID: session, Params: p})
	_, err := c.w.Write(append(msg, 0))
	c.mu.Unlock()
	if err != nil {
		c.t.Fatalf("cdp %s: %v\n%s", method, err, tail(c.stderr.String(), 2000))
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			c.t.Fatalf("cdp %s: %s", method, m.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				c.t.Fatalf("cdp %s: %v", method, err)
			}
		}
	case <-time.After(90 * time.Second):
		c.t.Fatalf("cdp %s: no answer in 90 s\n%s", method, tail(c.stderr.String(), 2000))
	}
}

// page opens a tab, attached with the Network, Page and Runtime events on,
// and returns its session.
func (c *cdp) page() string {
	c.t.Helper()
	var target struct {
		TargetID string `json:"targetId"`
	}
	c.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	c.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	for _, d := range []string{"Network.enable", "Page.enable", "Runtime.enable"} {
		c.call(att.SessionID, d, nil, nil)
	}
	return att.SessionID
}

// eval evaluates expr in the page and returns its value as a string.
func (c *cdp) eval(session, expr string) string {
	c.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	c.call(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.Result.Value == nil {
		return ""
	}
	return fmt.Sprint(r.Result.Value)
}

// eventsOf returns the events of method so far.
func (c *cdp) eventsOf(method string) []cdpMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []cdpMsg
	for _, m := range c.events {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}
