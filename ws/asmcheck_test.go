package ws

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A legacy-encoded SSE instruction (MOVQ AX, X0; PXOR; MOVOU …) executed
// while the upper halves of the YMM registers hold data costs a state
// transition. On some CPUs it is a few cycles; on the Intel Xeon
// (AVX-512 FP16) VMs this project is measured on it was about 150 ns per
// occurrence, which made every masked frame of 32 bytes or more cost
// 160 ns (BenchmarkMask/125: 156 ns, 8 ns without it). So each function of
// the assembly keeps two rules, checked here on every path:
//
//   - between the first instruction that uses a Y register and VZEROUPPER,
//     no legacy SSE instruction (a mnemonic without the V prefix that names
//     an X register): use the VEX form (VMOVQ, not MOVQ);
//   - no RET with the upper halves dirty: Go's own code (X15, the zero
//     register, is written with legacy MOVUPS) would pay the same.
func TestAsmAVXTransitions(t *testing.T) {
	files, err := filepath.Glob("*_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no *_amd64.s files found")
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkAVXTransitions(string(src)) {
			t.Errorf("%s:%s", f, p)
		}
	}
}

// TestCheckAVXTransitions shows that the check finds each mistake, through
// jumps as well as straight-line code.
func TestCheckAVXTransitions(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      int // problems found
	}{
		{"clean", "TEXT ·f(SB), 0, $0\n\tVMOVQ AX, X0\n\tVPBROADCASTD X0, Y0\n\tVZEROUPPER\n\tMOVQ AX, X1\n\tRET\n", 0},
		{"sse after ymm", "TEXT ·f(SB), 0, $0\n\tMOVQ AX, X0\n\tVPBROADCASTD X0, Y0\n\tMOVQ BX, X6\n\tVZEROUPPER\n\tRET\n", 1},
		{"ret dirty", "TEXT ·f(SB), 0, $0\n\tVMOVDQU 0(SI), Y1\n\tRET\n", 1},
		{"dirty through a jump", "TEXT ·f(SB), 0, $0\n\tVMOVDQU 0(SI), Y1\n\tJNZ sse\n\tVZEROUPPER\n\tRET\nsse:\n\tMOVOU 0(SI), X1\n\tRET\n", 2},
		{"clean label after jmp", "TEXT ·f(SB), 0, $0\n\tVMOVDQU 0(SI), Y1\n\tVZEROUPPER\n\tJMP sse\nsse:\n\tMOVOU 0(SI), X1\n\tRET\n", 0},
		{"comment ignored", "TEXT ·f(SB), 0, $0\n\t// VMOVDQU Y1\n\tMOVOU 0(SI), X1 // not Y2\n\tRET\n", 0},
	} {
		if got := checkAVXTransitions(c.src); len(got) != c.want {
			t.Errorf("%s: %d problems %q, want %d", c.name, len(got), got, c.want)
		}
	}
}

var (
	asmInstr = regexp.MustCompile(`^([A-Z][A-Z0-9]*)\b\s*(.*)$`)
	asmLabel = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*):`)
	asmYReg  = regexp.MustCompile(`\b[YZ]\d+\b`)
	asmXReg  = regexp.MustCompile(`\bX\d+\b`)
)

type asmLine struct {
	no         int
	label      string // a label line
	op, args   string
	targetJump string // the label a jump names
}

// checkAVXTransitions returns "line: problem" for each breach of the two
// rules above, following fall-through and jumps to labels within each TEXT.
func checkAVXTransitions(src string) []string {
	var probs []string
	var fn []asmLine
	flush := func() {
		probs = append(probs, checkAVXFunc(fn)...)
		fn = nil
	}
	for i, l := range strings.Split(src, "\n") {
		if j := strings.Index(l, "//"); j >= 0 {
			l = l[:j]
		}
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "TEXT"):
			flush()
		case asmLabel.MatchString(l):
			fn = append(fn, asmLine{no: i + 1, label: asmLabel.FindStringSubmatch(l)[1]})
		default:
			if m := asmInstr.FindStringSubmatch(l); m != nil {
				al := asmLine{no: i + 1, op: m[1], args: m[2]}
				if al.op[0] == 'J' && asmLabel.MatchString(al.args+":") {
					al.targetJump = al.args
				}
				fn = append(fn, al)
			}
		}
	}
	flush()
	return probs
}

func checkAVXFunc(fn []asmLine) []string {
	labels := map[string]int{}
	for i, l := range fn {
		if l.label != "" {
			labels[l.label] = i
		}
	}
	// dirty[i]: the upper halves may be dirty on entry to line i. Grows
	// only, so the walk ends.
	dirty := make([]bool, len(fn)+1)
	reached := make([]bool, len(fn)+1)
	reached[0] = true
	for changed := true; changed; {
		changed = false
		mark := func(i int, d bool) {
			if !reached[i] || (d && !dirty[i]) {
				reached[i] = true
				dirty[i] = dirty[i] || d
				changed = true
			}
		}
		for i, l := range fn {
			if !reached[i] {
				continue
			}
			d := dirty[i]
			switch {
			case l.op == "VZEROUPPER" || l.op == "VZEROALL":
				d = false
			case l.op != "" && asmYReg.MatchString(l.args):
				d = true
			}
			if l.targetJump != "" {
				if t, ok := labels[l.targetJump]; ok {
					mark(t, d)
				}
			}
			if l.op != "RET" && l.op != "JMP" {
				mark(i+1, d)
			}
		}
	}
	var probs []string
	for i, l := range fn {
		if !reached[i] || !dirty[i] || l.op == "" {
			continue
		}
		switch {
		case l.op == "RET":
			probs = append(probs, strconv.Itoa(l.no)+": RET with the upper halves of the Y registers dirty (VZEROUPPER first)")
		case l.op[0] != 'V' && asmXReg.MatchString(l.args) && !asmYReg.MatchString(l.args):
			probs = append(probs, strconv.Itoa(l.no)+": legacy SSE "+l.op+" "+l.args+" after a Y register and before VZEROUPPER (use the VEX form)")
		}
	}
	return probs
}
