package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

// Bounds of a send's wait for its response.
const (
	defaultSendTimeout = 5 * time.Second
	maxSendTimeout     = time.Minute
)

// sendRequest is the page's "send" message.
type sendRequest struct {
	T         string          `json:"t"`
	ID        int64           `json:"id"`
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data"`
	Context   json.RawMessage `json:"context"`
	Wait      bool            `json:"wait"`
	Response  string          `json:"response"` // "": Type + ".response"
	TimeoutMS int64           `json:"timeout_ms"`
}

// sendReply is the monitor's "sent" answer.
type sendReply struct {
	T        string `json:"t"`
	ID       int64  `json:"id"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	Response *row   `json:"response,omitempty"`
}

// send emits {"type","data","context"} under perm as `ovbus send` does and,
// when asked, waits for the first message of the response type after the
// bus relayed ours.
func (m *Monitor) send(ctx context.Context, perm *bus.Permissions, req sendRequest) sendReply {
	reply := sendReply{T: "sent", ID: req.ID}
	payload, err := encodeMessage(req)
	if err != nil {
		reply.Error = err.Error()
		return reply
	}
	respType := req.Response
	if respType == "" {
		respType = req.Type + ".response"
	}
	if req.Wait && perm != nil && !perm.CanReceive(respType) {
		reply.Error = fmt.Sprintf("the token may not receive %q", respType)
		return reply
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = defaultSendTimeout
	}
	timeout = min(timeout, maxSendTimeout)

	var f *bus.Follower
	if req.Wait { // before the emit, so that the response cannot be missed
		f = m.bus.Follow(bus.FollowOptions{Name: "monitor send"})
		defer f.Close()
	}
	if err := m.bus.EmitAs(perm, ws.OpText, payload); err != nil {
		if errors.Is(err, bus.ErrNotAllowed) {
			reply.Error = fmt.Sprintf("the token may not emit %q", req.Type)
		} else {
			reply.Error = err.Error()
		}
		return reply
	}
	if !req.Wait {
		reply.OK = true
		return reply
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := waitResponse(wctx, f, payload, respType, m.opts.MaxPayload)
	switch {
	case err == nil:
		reply.OK, reply.Response = true, &r
	case errors.Is(err, context.DeadlineExceeded):
		reply.Error = fmt.Sprintf("relayed, but no %q came within %v", respType, timeout)
	default:
		reply.Error = fmt.Sprintf("relayed, but waiting for %q: %v", respType, err)
	}
	return reply
}

// encodeMessage builds the frame of a send: data and context must be JSON
// objects (absent means {}).
func encodeMessage(req sendRequest) ([]byte, error) {
	if req.Type == "" {
		return nil, errors.New("the type is empty")
	}
	obj := func(what string, v json.RawMessage) (json.RawMessage, error) {
		v = bytes.TrimSpace(v)
		if len(v) == 0 || string(v) == "null" {
			return json.RawMessage("{}"), nil
		}
		var m map[string]json.RawMessage
		if v[0] != '{' || json.Unmarshal(v, &m) != nil {
			return nil, fmt.Errorf("%s must be a JSON object", what)
		}
		return v, nil
	}
	data, err := obj("data", req.Data)
	if err != nil {
		return nil, err
	}
	mctx, err := obj("context", req.Context)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Type    string          `json:"type"`
		Data    json.RawMessage `json:"data"`
		Context json.RawMessage `json:"context"`
	}{req.Type, data, mctx})
}

// waitResponse follows the log until our own frame has come by (so the
// response cannot be mistaken for it, even when it has our type) and then
// returns the first frame of type respType.
func waitResponse(ctx context.Context, f *bus.Follower, ours []byte, respType string, maxPayload int) (row, error) {
	buf := make([]bus.Frame, 0, 64)
	echoed := false
	for {
		var err error
		buf, err = f.Next(ctx, buf[:0])
		if err != nil {
			return row{}, err
		}
		for _, fr := range buf {
			if !echoed {
				echoed = fr.Op == ws.OpText && bytes.Equal(fr.Payload, ours)
				continue
			}
			if t := fr.Type(); t == respType {
				return newRow(fr, t, maxPayload), nil
			}
		}
	}
}
