#!/usr/bin/env bash
# A fake coding agent for the daemon's tests. The message on stdin is a
# command word and its arguments:
#   lines N          answers N lines
#   echo TEXT        answers TEXT
#   anchor TARGET    answers around an anchor line [anchor: TARGET]
#   flaky KIND N     fails its first N attempts with upstream error KIND
#                    (on stderr, as an agent reports it), then answers
#   hang             answers one line and never ends
#   gate FILE        answers one line, waits for FILE to exist, answers another
#   attach           answers the name and content of each attachment
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
	thinking) echo 'API Error: 400 {"type":"invalid_request_error","message":"messages.1.content.0: expected thinking block"}' ;;
	rate) echo 'API Error: 429 {"type":"rate_limit_error"}' ;;
	server) echo 'API Error: 500 Internal server error' ;;
	overloaded) echo 'API Error: 529 {"type":"overloaded_error","message":"Overloaded"}' ;;
	gateway) echo 'upstream: Gateway Timeout' ;;
	prompt) echo 'API Error: 400 prompt is too long: 210000 tokens > 200000 maximum' ;;
	request) echo 'API Error: 400 {"type":"invalid_request_error","message":"messages: field required"}' ;;
	*) echo "crashed" ;;
	esac >&2
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
