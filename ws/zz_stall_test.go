package ws

import (
	"fmt"
	"testing"
)

func BenchmarkZZStall(b *testing.B) {
	for _, n := range []int{96, 100, 125, 127, 128, 140, 160, 192} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			src := make([]byte, 512)
			mid := make([]byte, 512)
			dst := make([]byte, 512)
			for i := 0; i < b.N; i++ {
				maskXOR(&mid[0], &src[0], n, 0x12345678)
				maskCopyHi(&dst[0], &mid[0], n, 0x12345678)
			}
		})
	}
}
