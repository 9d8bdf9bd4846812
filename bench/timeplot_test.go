package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"
)

// svgElement is what the tests read of an SVG element.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
}

// parseSVG decodes an SVG document into its elements, failing the test if
// it is not well-formed XML.
func parseSVG(t *testing.T, b []byte) []svgElement {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var out []svgElement
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
		case xml.CharData:
			if len(out) > 0 {
				out[len(out)-1].text += string(tok)
			}
		}
	}
}

// polylinePoints returns the x,y pairs of a polyline's points attribute.
func polylinePoints(t *testing.T, e svgElement) [][2]float64 {
	t.Helper()
	var pts [][2]float64
	for _, p := range strings.Fields(e.attrs["points"]) {
		xy := strings.Split(p, ",")
		x, err1 := strconv.ParseFloat(xy[0], 64)
		y, err2 := strconv.ParseFloat(xy[1], 64)
		if len(xy) != 2 || err1 != nil || err2 != nil {
			t.Fatalf("bad point %q", p)
		}
		pts = append(pts, [2]float64{x, y})
	}
	return pts
}

func TestWriteTimeSVG(t *testing.T) {
	flat := TimeLine{Name: "RSS <MiB> & co"}
	rising := TimeLine{Name: "live heap"}
	for s := 0.0; s <= 1800; s += 10 {
		flat.Points = append(flat.Points, TimePoint{s, 30})
		rising.Points = append(rising.Points, TimePoint{s, 5 + s/100})
	}
	c := TimeChart{
		Title:     "soak",
		Subtitle:  "a test",
		Panels:    []TimePanel{{Title: "memory", Unit: "MiB", Lines: []TimeLine{flat, rising}}, {Title: "empty"}},
		Spans:     []TimeSpan{{60, 120}, {180, 240}},
		SpanLabel: "quiet",
		Footnote:  "shaded: quiet",
	}
	var b bytes.Buffer
	if err := WriteTimeSVG(&b, c); err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, b.Bytes())
	var lines [][][2]float64
	var spans, texts []svgElement
	for _, e := range els {
		switch {
		case e.name == "polyline":
			lines = append(lines, polylinePoints(t, e))
		case e.name == "rect" && e.attrs["fill"] == colorSpan:
			spans = append(spans, e)
		case e.name == "text":
			texts = append(texts, e)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d polylines, want 2 (the empty panel draws none)", len(lines))
	}
	// Time runs left to right from the plot's left edge to its right one.
	for i, pts := range lines {
		if len(pts) != len(flat.Points) {
			t.Fatalf("line %d: %d points, want %d", i, len(pts), len(flat.Points))
		}
		if pts[0][0] != timePlotL || pts[len(pts)-1][0] != timePlotR {
			t.Errorf("line %d: x from %.1f to %.1f, want %d to %d", i, pts[0][0], pts[len(pts)-1][0], timePlotL, timePlotR)
		}
		for j := 1; j < len(pts); j++ {
			if pts[j][0] <= pts[j-1][0] {
				t.Fatalf("line %d: x goes back at point %d", i, j)
			}
		}
	}
	// A flat series is a level line; a rising one climbs (y grows downward)
	// and stays inside its panel.
	for _, p := range lines[0] {
		if p[1] != lines[0][0][1] {
			t.Fatalf("the flat series is not level: y %.1f and %.1f", lines[0][0][1], p[1])
		}
	}
	r := lines[1]
	if !(r[len(r)-1][1] < r[0][1]) {
		t.Errorf("the rising series does not rise: y %.1f → %.1f", r[0][1], r[len(r)-1][1])
	}
	plotT := float64(timeTitleH + timePanelT)
	plotB := float64(timeTitleH + timePanelH - timePanelB)
	for _, pts := range lines {
		for _, p := range pts {
			if p[1] < plotT || p[1] > plotB {
				t.Fatalf("y %.1f outside the first panel's plot [%.1f, %.1f]", p[1], plotT, plotB)
			}
		}
	}
	// Each span shaded in each panel, plus its legend swatch.
	if want := len(c.Spans)*len(c.Panels) + 1; len(spans) != want {
		t.Errorf("%d shaded rects, want %d", len(spans), want)
	}
	has := func(s string) bool {
		for _, e := range texts {
			if strings.TrimSpace(e.text) == s {
				return true
			}
		}
		return false
	}
	// 30 minutes count in minutes; names come through escaped and whole.
	for _, want := range []string{"0 min", "30 min", "RSS <MiB> & co", "no data", "MiB", "quiet"} {
		if !has(want) {
			t.Errorf("no text %q", want)
		}
	}
}

func TestWriteTimeSVGSeconds(t *testing.T) {
	c := TimeChart{Panels: []TimePanel{{Lines: []TimeLine{{Name: "x", Points: []TimePoint{{0, 1}, {100, 2}}}}}}}
	var b bytes.Buffer
	if err := WriteTimeSVG(&b, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ">100 s<") {
		t.Errorf("a 100 s run has no 100 s tick:\n%s", b.String())
	}
	if err := WriteTimeSVG(&b, TimeChart{}); err == nil {
		t.Error("a chart without panels drew")
	}
}
