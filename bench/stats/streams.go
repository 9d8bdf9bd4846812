package stats

// Streams checks what one receiver gets from several senders, each of which
// numbers its frames 0, 1, 2, …: an Order per sender, so that a frame is
// "out of order" only when it comes after a later frame of the same sender
// (frames of different senders may interleave in any order), and a
// duplicate only when the same sender's number comes twice.
//
// Observe does not allocate. A Streams is not safe for concurrent use: keep
// one per receiver.
type Streams struct {
	orders []*Order
	// Strangers counts frames that named a sender outside [0, senders).
	Strangers int
}

// NewStreams returns a Streams for senders that send up to expected[i]
// frames each.
func NewStreams(expected []int) *Streams {
	s := &Streams{orders: make([]*Order, len(expected))}
	for i, n := range expected {
		s.orders[i] = NewOrder(n)
	}
	return s
}

// Observe records the delivery of frame seq of sender from, and reports
// whether it is the first delivery of that frame (a duplicate, a stranger or
// a number beyond the sender's expected count is not).
func (s *Streams) Observe(from int, seq uint64) (first bool) {
	if from < 0 || from >= len(s.orders) {
		s.Strangers++
		return false
	}
	o := s.orders[from]
	before := o.Distinct
	o.Observe(seq)
	return o.Distinct > before
}

// StreamTotals adds up a Streams' Orders.
type StreamTotals struct {
	Distinct   int // frames received at least once
	OutOfOrder int // frames that came after a later frame of the same sender
	Duplicates int // frames received more than once (each repeat counted)
	Unexpected int // numbers beyond a sender's expected count, and strangers
}

// Totals returns the counts over every sender.
func (s *Streams) Totals() StreamTotals {
	t := StreamTotals{Unexpected: s.Strangers}
	for _, o := range s.orders {
		t.Distinct += o.Distinct
		t.OutOfOrder += o.OutOfOrder
		t.Duplicates += o.Duplicates
		t.Unexpected += o.Unexpected
	}
	return t
}

// Lost returns how many of the frames the senders did send never arrived:
// the sum over senders of sent[i] − the distinct frames received from i
// (sent[i] may be below the expected count when a sender stopped early).
// A sender missing from sent counts as having sent nothing.
func (s *Streams) Lost(sent []int) int {
	lost := 0
	for i, o := range s.orders {
		n := 0
		if i < len(sent) {
			n = sent[i]
		}
		lost += max(n-o.Distinct, 0)
	}
	return lost
}
