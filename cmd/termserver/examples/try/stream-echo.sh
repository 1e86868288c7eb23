#!/bin/sh
# stream-echo: the try config's agent. A Terminal Protocol v1 agent in
# rich mode (docs/agents.md), in plain sh with no other tool: one
# process per message, the message as its first argument ({message} in
# the config's command), the answer written word by word as "delta"
# lines, as an LLM agent streams, then the whole answer as a "message".
set -f                      # the user's words are not file patterns
cat >/dev/null              # the JSON envelope on stdin: not needed here

# json TEXT: TEXT as the inside of a JSON string (\ and " escaped,
# control characters dropped).
json() {
	printf '%s' "$1" | tr -d '\000-\037' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
}

printf '{"type":"progress","text":"thinking"}\n'
answer="You said:"
for w in $1; do
	answer="$answer $w"
done
for w in $answer; do
	printf '{"type":"delta","text":"%s "}\n' "$(json "$w")"
	sleep "${STREAM_ECHO_DELAY:-0.15}"
done
printf '{"type":"message","text":"%s"}\n' "$(json "$answer")"
