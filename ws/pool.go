package ws

import (
	"math/bits"
	"sync"
)

// Message buffers: a connection keeps at most keepBuf bytes of buffer for
// the messages it receives between messages; larger buffers, grown for one
// message, go back to pools by capacity class (4 KiB << i up to
// maxPooledBuf) when the message is done with, and buffers beyond the
// largest class are left to the garbage collector. So an idle connection
// costs the same whatever it received before (doc.go, "Limits and memory").
const (
	keepBuf      = 4 << 10
	minPooledBuf = 4 << 10
	maxPooledBuf = 1 << 20
	numBufPools  = 9 // 4 KiB .. 1 MiB
)

var bufPools [numBufPools]sync.Pool

// bufClass returns the index of the smallest class holding n bytes, or -1
// when n is larger than maxPooledBuf.
func bufClass(n int) int {
	if n <= minPooledBuf {
		return 0
	}
	if n > maxPooledBuf {
		return -1
	}
	return bits.Len(uint(n-1)) - 12
}

// pooledSize reports whether n is the capacity of a class.
func pooledSize(n int) bool {
	i := bufClass(n)
	return i >= 0 && minPooledBuf<<i == n
}

// getBuf returns an empty buffer of at least n bytes of capacity, from the
// pools when n fits a class (its handle is non-nil then).
func getBuf(n int) (*[]byte, []byte) {
	i := bufClass(n)
	if i < 0 {
		return nil, make([]byte, 0, n)
	}
	if bp, ok := bufPools[i].Get().(*[]byte); ok {
		return bp, (*bp)[:0]
	}
	b := make([]byte, 0, minPooledBuf<<i)
	return &b, b
}

// putBuf returns a buffer that getBuf handed out with handle bp.
func putBuf(bp *[]byte, b []byte) {
	if bp == nil {
		return
	}
	if !pooledSize(cap(b)) {
		return
	}
	*bp = b[:0]
	bufPools[bufClass(cap(b))].Put(bp)
}

// growCap returns the capacity a message buffer holding n bytes grows to
// when it needs need bytes. It follows the data that has arrived, never the
// length a header announces: a pooled buffer takes the next class up to
// maxPooledBuf; otherwise the capacity doubles up to maxPooledBuf and then
// grows by half, and never passes bound (< 0: none), the most the message
// can hold, when that is known.
func growCap(n, need int, bound int64, pooled bool) int {
	if pooled && need <= maxPooledBuf {
		return minPooledBuf << bufClass(need)
	}
	c := max(need, n+n/2)
	if n < maxPooledBuf {
		c = max(need, 2*n, minPooledBuf)
	}
	if bound >= 0 && int64(c) > bound {
		c = max(need, int(bound))
	}
	return c
}
