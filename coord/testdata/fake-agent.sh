#!/usr/bin/env bash
# A fake coding agent for the daemon's tests. The message on stdin is a
# command word and its arguments:
#   lines N          answers N lines
#   echo TEXT        answers TEXT
#   anchor TARGET    answers around an anchor line [anchor: TARGET]
#   flaky KIND N     fails its first N attempts with error KIND, printed as
#                    the coding agents print it (Claude Code on stdout,
#                    Codex on stderr), then answers
#   hang             answers one line and never ends
#   gate FILE        answers one line, waits for FILE to exist, answers another
#   attach           answers the name and content of each attachment
#   env              answers its environment, one variable a line, sorted
#   leak             prints its ANTHROPIC_API_KEY and a bearer token on
#                    stderr and fails
#   Story run ...    a task of a story run: waits for $FAKE_AGENT_GATE to
#                    exist when set, fails when the message names
#                    $FAKE_AGENT_FAIL_TASK, else answers "worked on TASK"
set -f
read -r -d '' msg
set -- $msg
cmd=$1
shift
upstream() {
	case "$1" in
	thinking) echo 'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`."}}' ;;
	rate) echo 'API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your rate limit."}}' ;;
	server) echo 'ERROR: unexpected status 500 Internal Server Error: internal error, url: https://api.example/v1/responses' >&2 ;;
	overloaded) echo 'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":null}' ;;
	gateway) echo 'ERROR: exceeded retry limit, last status: 504 Gateway Timeout' >&2 ;;
	prompt) echo 'Prompt is too long' ;;
	request) echo 'ERROR: unexpected status 400 Bad Request: messages: field required' >&2 ;;
	traceback)
		{
			echo 'Traceback (most recent call last):'
			echo '  File "/src/tools/build.py", line 503, in main'
			echo '    out.write(buf)'
			echo 'OSError: could not write 429 bytes: overloaded.md is read-only'
		} >&2
		;;
	*) echo "crashed" >&2 ;;
	esac
}
case "$cmd" in
lines) for i in $(seq 1 "$1"); do echo "line $i"; done ;;
echo) echo "$*" ;;
anchor)
	echo "on it"
	echo "[anchor: $*]"
	echo "done"
	;;
flaky)
	if [ "$MESH_COORD_ATTEMPT" -lt "$2" ]; then
		echo "partial answer of attempt $MESH_COORD_ATTEMPT"
		upstream "$1"
		exit 1
	fi
	echo "answer of attempt $MESH_COORD_ATTEMPT"
	;;
hang)
	echo "started"
	exec sleep 600
	;;
gate)
	echo "waiting"
	while [ ! -e "$1" ]; do sleep 0.02; done
	echo "released"
	;;
attach)
	while IFS= read -r f; do
		[ -n "$f" ] && echo "$(basename "$f"): $(cat "$f")"
	done <<<"$MESH_COORD_ATTACHMENTS"
	;;
env) env | sort ;;
leak)
	echo "debug: ANTHROPIC_API_KEY is $ANTHROPIC_API_KEY" >&2
	echo "curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz' failed" >&2
	exit 3
	;;
Story)
	task=$7
	while [ -n "$FAKE_AGENT_GATE" ] && [ ! -e "$FAKE_AGENT_GATE" ]; do sleep 0.02; done
	if [ -n "$FAKE_AGENT_FAIL_TASK" ] && [ "$task" = "$FAKE_AGENT_FAIL_TASK" ]; then
		upstream request
		exit 1
	fi
	echo "worked on $task"
	;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
