package monitor

import "github.com/ovbus/ovbus/bus"

// session is one connected client as the page shows it.
type session struct {
	ID             uint64 `json:"id"`
	Remote         string `json:"remote"`
	UserAgent      string `json:"user_agent,omitempty"`
	Origin         string `json:"origin,omitempty"`
	Token          string `json:"token,omitempty"`
	Identity       string `json:"identity,omitempty"`
	Connected      int64  `json:"connected"` // unix ms
	FramesIn       uint64 `json:"frames_in"`
	BytesIn        uint64 `json:"bytes_in"`
	FramesOut      uint64 `json:"frames_out"`
	BytesOut       uint64 `json:"bytes_out"`
	QueuedMessages int    `json:"queued_messages"`
	QueuedBytes    int64  `json:"queued_bytes"`
}

// closed is one recent close.
type closed struct {
	Session session `json:"session"`
	Closed  int64   `json:"closed"` // unix ms
	Reason  string  `json:"reason"`
	Code    int     `json:"code,omitempty"`
	Detail  string  `json:"detail,omitempty"`
}

// clientList is the "clients" message of doc.go.
type clientList struct {
	T        string    `json:"t"`
	Sessions []session `json:"sessions"`
	Closes   []closed  `json:"closes"`
}

func newSession(s bus.SessionInfo) session {
	return session{
		ID: s.ID, Remote: s.Remote, UserAgent: s.UserAgent, Origin: s.Origin, Token: s.Token, Identity: s.Identity,
		Connected: s.Connected.UnixMilli(),
		FramesIn:  s.FramesIn, BytesIn: s.BytesIn, FramesOut: s.FramesOut, BytesOut: s.BytesOut,
		QueuedMessages: s.QueuedMessages, QueuedBytes: s.QueuedBytes,
	}
}

// clients lists the bus's clients and recent closes, or nothing for a page
// without full access.
func (p *page) clients() clientList {
	l := clientList{T: "clients", Sessions: []session{}, Closes: []closed{}}
	if !p.full {
		return l
	}
	for _, s := range p.m.bus.Sessions() {
		l.Sessions = append(l.Sessions, newSession(s))
	}
	for _, c := range p.m.bus.RecentCloses() {
		l.Closes = append(l.Closes, closed{
			Session: newSession(c.Session), Closed: c.Closed.UnixMilli(),
			Reason: c.Reason, Code: int(c.Code), Detail: c.Detail,
		})
	}
	return l
}
