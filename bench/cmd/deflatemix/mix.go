package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// The OVOS-like mix: interactions as an OVOS device relays them, each the
// messages of one utterance from the wake word to the end of the answer,
// every message carrying the session it belongs to (the device's own,
// "default", or a satellite's), as ovos-bus-client serialises it.

type msg struct {
	Type    string         `json:"type"`
	Data    map[string]any `json:"data"`
	Context map[string]any `json:"context"`
}

// A skill and the utterances it answers, with what it says.
type skill struct {
	id, intent string
	asks       []string
	says       string
	gui        string // the GUI page it shows, "" for none
}

var skills = []skill{
	{"skill-date-time.openvoiceos", "TimeSkill:what.time.is.it.intent", []string{"what time is it", "what's the time", "tell me the time"}, "It's %d minutes past %d.", "time.qml"},
	{"skill-weather.openvoiceos", "WeatherSkill:current.weather.intent", []string{"what's the weather like", "is it going to rain today", "how hot is it outside"}, "Right now it's %d degrees and partly cloudy in %s.", "current_weather.qml"},
	{"skill-timer.openvoiceos", "TimerSkill:start.timer.intent", []string{"set a timer for %d minutes", "start a %d minute timer"}, "Timer started for %d minutes.", "timer.qml"},
	{"skill-wikipedia.openvoiceos", "WikipediaSkill:wiki.intent", []string{"tell me about %s", "who is %s"}, "Here is what I found about %s on Wikipedia: it is a subject of many articles.", "wikipedia.qml"},
	{"skill-volume.openvoiceos", "VolumeSkill:increase.volume.intent", []string{"turn it up", "volume up", "louder please"}, "Volume set to %d percent.", ""},
	{"ovos-skill-hello-world.openvoiceos", "HelloWorldSkill:hello.world.intent", []string{"hello", "how are you", "thank you"}, "Hello! I am fine, thank you for asking.", ""},
}

var topics = []string{"Lisbon", "the Moon", "Ada Lovelace", "penguins", "the Eiffel Tower", "jazz"}

var pipeline = []string{"stop_high", "converse", "ocp_high", "padatious_high", "adapt_high", "common_qa", "ocp_medium",
	"fallback_high", "stop_medium", "padatious_medium", "adapt_medium", "adapt_low", "ocp_low", "fallback_medium", "fallback_low"}

// session is the session object of a device or satellite as messages carry it.
func session(id string, active [][]any, speaking bool) map[string]any {
	return map[string]any{
		"session_id":       id,
		"active_skills":    active,
		"utterance_states": map[string]any{},
		"lang":             "en-US",
		"context":          map[string]any{"frame_stack": []any{}, "timeout": 120},
		"site_id":          "unknown",
		"pipeline":         pipeline,
		"stt":              map[string]any{"plugin_id": "ovos-stt-plugin-server", "config": map[string]any{}},
		"tts":              map[string]any{"plugin_id": "ovos-tts-plugin-server", "config": map[string]any{}},
		"location": map[string]any{"city": map[string]any{"code": "Lawrence", "name": "Lawrence",
			"state": map[string]any{"code": "KS", "name": "Kansas", "country": map[string]any{"code": "US", "name": "United States"}}},
			"coordinate": map[string]any{"latitude": 38.971669, "longitude": -95.23525},
			"timezone":   map[string]any{"code": "America/Chicago", "name": "Central Standard Time", "dstOffset": 3600000, "offset": -21600000}},
		"system_unit":         "metric",
		"time_format":         "full",
		"date_format":         "DMY",
		"is_speaking":         speaking,
		"blacklisted_skills":  []any{},
		"blacklisted_intents": []any{},
	}
}

// generateMix returns n messages of OVOS interactions, the same for a given n.
func generateMix(n int) [][]byte {
	rng := rand.New(rand.NewPCG(2026, 12))
	sessions := []string{"default", "default", "default", "5f0c3b1e-8d2a-4c8e-9a7b-3e6f1d2c4b5a", "a41e9c7d-2b3f-4e5a-8c6d-7f8e9a0b1c2d"}
	var out [][]byte
	add := func(m msg) {
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	ts := 1765000000.0
	for len(out) < n {
		ts += 5 + rng.Float64()*60
		sid := sessions[rng.IntN(len(sessions))]
		sk := skills[rng.IntN(len(skills))]
		arg := rng.IntN(60)
		topic := topics[rng.IntN(len(topics))]
		ask := sk.asks[rng.IntN(len(sk.asks))]
		if countVerbs(ask) > 0 {
			if sk.id == "skill-wikipedia.openvoiceos" {
				ask = fmt.Sprintf(ask, topic)
			} else {
				ask = fmt.Sprintf(ask, 1+arg%30)
			}
		}
		say := sk.says
		switch countVerbs(say) {
		case 1:
			if sk.id == "skill-wikipedia.openvoiceos" {
				say = fmt.Sprintf(say, topic)
			} else {
				say = fmt.Sprintf(say, arg)
			}
		case 2:
			if sk.id == "skill-weather.openvoiceos" {
				say = fmt.Sprintf(say, 5+arg%25, "Lawrence")
			} else {
				say = fmt.Sprintf(say, arg, 1+arg%12)
			}
		}
		active := [][]any{{sk.id, ts}, {"ovos-skill-hello-world.openvoiceos", ts - 300}}
		sess := session(sid, active, false)
		audio := map[string]any{"source": "audio", "destination": []any{"skills"}, "session": sess}
		fromSkill := map[string]any{"source": []any{"skills"}, "destination": "audio", "session": sess, "skill_id": sk.id}
		add(msg{"recognizer_loop:wakeword", map[string]any{"utterance": "hey mycroft", "session": sid}, audio})
		add(msg{"recognizer_loop:record_begin", map[string]any{}, audio})
		add(msg{"recognizer_loop:record_end", map[string]any{}, audio})
		add(msg{"recognizer_loop:utterance", map[string]any{"utterances": []any{ask}, "lang": "en-US"}, audio})
		add(msg{sk.intent, map[string]any{"intent_type": sk.intent, "utterance": ask, "lang": "en-US",
			"__tags__": []any{}, "confidence": 0.9 + rng.Float64()/10}, fromSkill})
		add(msg{"mycroft.skill.handler.start", map[string]any{"name": sk.intent}, fromSkill})
		if sk.gui != "" {
			add(msg{"gui.value.set", map[string]any{"__from": sk.id, "text": say, "value": arg}, fromSkill})
			add(msg{"gui.page.show", map[string]any{"page_names": []any{sk.gui}, "index": 0, "__from": sk.id, "__idle": 15}, fromSkill})
		}
		add(msg{"speak", map[string]any{"utterance": say, "expect_response": false, "lang": "en-US",
			"meta": map[string]any{"skill": sk.id, "dialog": "answer", "data": map[string]any{"value": arg}}}, fromSkill})
		speaking := session(sid, active, true)
		audioOut := map[string]any{"source": "audio", "destination": []any{"skills"}, "session": speaking}
		add(msg{"recognizer_loop:audio_output_start", map[string]any{}, audioOut})
		add(msg{"recognizer_loop:audio_output_end", map[string]any{}, audioOut})
		add(msg{"mycroft.skill.handler.complete", map[string]any{"name": sk.intent}, fromSkill})
		add(msg{"ovos.utterance.handled", map[string]any{}, fromSkill})
		if rng.IntN(4) == 0 { // now and then, a service's heartbeat
			add(msg{"mycroft.skills.is_alive", map[string]any{}, map[string]any{"source": "ovos-core"}})
			add(msg{"mycroft.skills.is_alive.response", map[string]any{"status": true}, map[string]any{"destination": "ovos-core"}})
		}
	}
	return out[:n]
}

// countVerbs counts the formatting verbs of a template.
func countVerbs(s string) int {
	n := 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '%' && (s[i+1] == 'd' || s[i+1] == 's') {
			n++
		}
	}
	return n
}
